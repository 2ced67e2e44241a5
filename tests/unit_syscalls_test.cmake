# deploy/gpumemd.syscalls is the unit's SystemCallFilter= expanded by scripts/unit-syscalls
# (tests/sandbox/unit_sandbox reads it where systemd is missing). This checks that it still
# matches the unit. Run by CTest with -DSOURCE_DIR, -DUNIT, -DSYSCALLS; prints SKIPPED where
# systemd-analyze or python3 is missing.
find_program(SYSTEMD_ANALYZE systemd-analyze)
find_program(PYTHON3 python3)
if(NOT SYSTEMD_ANALYZE OR NOT PYTHON3)
  message("SKIPPED: systemd-analyze (Debian package systemd) and python3 are needed")
  return()
endif()
execute_process(COMMAND ${PYTHON3} ${SOURCE_DIR}/scripts/unit-syscalls ${UNIT}
                RESULT_VARIABLE status OUTPUT_VARIABLE expanded ERROR_VARIABLE error)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "scripts/unit-syscalls ${UNIT} failed: ${error}")
endif()
file(READ ${SYSCALLS} committed)
# The comment lines name the systemd that expanded the list; the calls must be the same.
string(REGEX REPLACE "#[^\n]*\n" "" expanded "${expanded}")
string(REGEX REPLACE "#[^\n]*\n" "" committed "${committed}")
if(NOT expanded STREQUAL committed)
  message(FATAL_ERROR "${SYSCALLS} no longer matches ${UNIT}'s SystemCallFilter=; regenerate:\n"
                      "  scripts/unit-syscalls ${UNIT} > ${SYSCALLS}")
endif()
message("${SYSCALLS} matches ${UNIT}'s SystemCallFilter=")
