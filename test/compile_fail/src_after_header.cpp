// expect: typeflow/src.hpp: include it before any other typeflow header
// Under TYPEFLOW_SEPARATE_COMPILATION, typeflow/src.hpp compiles the non-template code; a typeflow
// header read before it in the same unit was read without its bodies, which would go missing.
#define TYPEFLOW_SEPARATE_COMPILATION 1
#ifndef TYPEFLOW_COMPILE_FAIL_CONTROL
#include <typeflow/io/trace.hpp>
#endif
#include <typeflow/src.hpp>

int main() {}
