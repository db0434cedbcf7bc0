// typeflow's non-template code (checkpoint files, traces and profiles, graph pictures, data input,
// the run time's plain functions), compiled once for the main job and the gpt, lstm and resnet
// examples: their targets define TYPEFLOW_SEPARATE_COMPILATION (see typeflow/core/compiled.hpp),
// so each main.cpp only declares it.
#include "typeflow/src.hpp"
