# scripts.check_layers: scripts/check_layers.py on a fake tree: a clean tree passes, an upward
# include fails naming file:line and the rule, a named exception excuses it, an exception
# that matches nothing any more (stale) fails, and a forbidden word in a layer's code fails.
# Usage: cmake -DPYTHON=<python3> -DCHECKER=<check_layers.py> -DWORK=<scratch dir> -P this file
file(REMOVE_RECURSE "${WORK}")
set(root "${WORK}/typeflow")
file(WRITE "${root}/core/dtype.hpp" "#pragma once\n")
file(WRITE "${root}/ops/add.hpp" "#pragma once\n#include \"../core/dtype.hpp\"\n")
file(WRITE "${root}/backend/cpu/add.hpp"
     "#pragma once\n#include \"../../ops/add.hpp\"\n#include <typeflow/core/dtype.hpp>\n")
set(layers "layer core:\nlayer ops: core  # ops never include a backend\nlayer backend/cpu: ops core\n")
file(WRITE "${WORK}/layers.txt" "${layers}")

function(check expect_rc expect_regex what)
  execute_process(COMMAND "${PYTHON}" "${CHECKER}" --root "${root}" --table "${WORK}/layers.txt"
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL expect_rc OR NOT "${out}${err}" MATCHES "${expect_regex}")
    message(FATAL_ERROR "${what}: expected exit ${expect_rc} and /${expect_regex}/, got ${rc}:\n"
                        "${out}${err}")
  endif()
endfunction()

check(0 "3 files under .* follow" "a tree that follows the table")

# ops/mul.hpp includes a backend on its line 3.
file(WRITE "${root}/ops/mul.hpp"
     "#pragma once\n#include \"add.hpp\"\n#include \"../backend/cpu/add.hpp\"\n")
check(1 "ops/mul.hpp:3: ops -> backend/cpu \\(#include of backend/cpu/add.hpp\\) breaks the rule: ops may include only core \\(ops never include a backend\\)"
      "an upward include")

# A new directory with no layer line.
file(WRITE "${root}/precision/cast.hpp" "#pragma once\n")
check(1 "no layer in .* holds precision/cast.hpp" "a directory missing from the table")
file(REMOVE_RECURSE "${root}/precision")

# The same include, named as an exception.
file(WRITE "${WORK}/layers.txt"
     "${layers}exception ops/mul.hpp -> backend/cpu/add.hpp  # to move into backend/cpu\n")
check(0 "1 recorded exceptions" "an include named as an exception")

# The include is gone: the exception is stale and fails.
file(WRITE "${root}/ops/mul.hpp" "#pragma once\n#include \"add.hpp\"\n")
check(1 "layers.txt:4: stale exception ops/mul.hpp -> backend/cpu/add.hpp" "a stale exception")

# A file with a layer of its own inside a directory layer (backend/cpu/decl.hpp below ops):
# ops may include it, it may not include the rest of its directory, and whoever may include the
# directory may include the file.
file(WRITE "${root}/backend/cpu/decl.hpp" "#pragma once\n#include \"../../core/dtype.hpp\"\n")
file(WRITE "${root}/ops/mul.hpp" "#pragma once\n#include \"../backend/cpu/decl.hpp\"\n")
file(WRITE "${WORK}/layers.txt"
     "layer core:\nlayer backend/cpu/decl.hpp: core\nlayer ops: backend/cpu/decl.hpp core\nlayer backend/cpu: ops core\n")
check(0 "5 files under .* follow" "a file layer below its directory")
file(WRITE "${root}/backend/cpu/decl.hpp" "#pragma once\n#include \"add.hpp\"\n")
check(1 "backend/cpu/decl.hpp:2: backend/cpu/decl.hpp -> backend/cpu \\(#include of backend/cpu/add.hpp\\)"
      "a file layer including its directory")

# A forbidden word: used in code it fails, in a comment it does not.
file(WRITE "${root}/backend/cpu/decl.hpp" "#pragma once\n// is_cpu in a comment\n")
file(APPEND "${WORK}/layers.txt" "forbid ops: is_cpu  # ask the backend\n")
check(0 "5 files under .* follow" "a forbidden word in a comment")
file(WRITE "${root}/ops/mul.hpp" "#pragma once\nconstexpr bool b = D::is_cpu;\n")
check(1 "ops/mul.hpp:2: uses is_cpu, which ops may not \\(ask the backend\\)" "a forbidden word")

file(REMOVE_RECURSE "${WORK}")
message(STATUS "check_layers: violation, missing layer, exception, stale exception, file layers and forbidden words OK")
