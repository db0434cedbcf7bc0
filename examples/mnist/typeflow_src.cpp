// typeflow's non-template code (checkpoint files, traces and profiles, graph pictures, data input,
// the run time's plain functions), compiled once for the main job: its targets define
// TYPEFLOW_SEPARATE_COMPILATION (see typeflow/core/compiled.hpp), so main.cpp only declares it.
#include "typeflow/src.hpp"
