// typeflow's non-template code (checkpoint files, traces and profiles, graph pictures, data input,
// the run time's plain functions) compiled once for the unit tests, which define
// TYPEFLOW_SEPARATE_COMPILATION (typeflow/core/compiled.hpp): each test then skips those bodies
// and nlohmann-json, about a third of its header parse, and their code generation. The deep
// models and the quick start stay header-only, as most users build them.
#include "typeflow/src.hpp"
