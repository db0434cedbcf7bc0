# example.quickstart: the README's quick-start block is examples/quickstart.cpp, and running the
# program prints exactly the README's output block.
# Usage: cmake -DREADME=<README.md> -DSOURCE=<quickstart.cpp> -DEXE=<quickstart> -P readme_quickstart.cmake
file(READ "${README}" readme)

function(readme_block begin_marker end_marker out)
  string(FIND "${readme}" "${begin_marker}" b)
  string(FIND "${readme}" "${end_marker}" e)
  if(b EQUAL -1 OR e EQUAL -1)
    message(FATAL_ERROR "README.md: markers ${begin_marker} / ${end_marker} not found")
  endif()
  string(LENGTH "${begin_marker}" len)
  math(EXPR b "${b} + ${len}")
  math(EXPR n "${e} - ${b}")
  string(SUBSTRING "${readme}" ${b} ${n} text)
  # Drop the code fence lines.
  string(REGEX REPLACE "^[\n]*```[a-z]*\n" "" text "${text}")
  string(REGEX REPLACE "\n```[\n]*$" "\n" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

readme_block("<!-- quickstart:begin -->" "<!-- quickstart:end -->" code)
readme_block("<!-- quickstart-output:begin -->" "<!-- quickstart-output:end -->" expected)

file(READ "${SOURCE}" source)
if(NOT code STREQUAL source)
  message(FATAL_ERROR "README.md's quick-start block differs from ${SOURCE}")
endif()

execute_process(COMMAND "${EXE}" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "quickstart exited with ${rc}")
endif()
if(NOT out STREQUAL expected)
  message(FATAL_ERROR "quickstart printed:\n${out}\nREADME.md says:\n${expected}")
endif()
message(STATUS "README quick-start block and output match")
