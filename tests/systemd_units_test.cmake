# Checks deploy/'s systemd units with `systemd-analyze verify`: unknown keys, bad values, a
# socket the service does not name. The units point at /usr/local/bin/gpumemd, which verify
# wants to exist, so copies that point at the built daemon are checked. Run by CTest with
# -DSOURCE_DIR, -DDAEMON, -DWORK_DIR; prints SKIPPED where systemd-analyze is missing.
find_program(SYSTEMD_ANALYZE systemd-analyze)
if(NOT SYSTEMD_ANALYZE)
  message("SKIPPED: systemd-analyze is not installed (Debian package systemd)")
  return()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
file(READ ${SOURCE_DIR}/deploy/gpumemd.service service)
string(REPLACE "/usr/local/bin/gpumemd" "${DAEMON}" service "${service}")
file(WRITE ${WORK_DIR}/gpumemd.service "${service}")
file(COPY ${SOURCE_DIR}/deploy/gpumemd.socket DESTINATION ${WORK_DIR})
execute_process(COMMAND ${SYSTEMD_ANALYZE} verify --man=no ./gpumemd.socket ./gpumemd.service
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
# verify also speaks of the host's own units, which are not ours to judge: only lines about
# ours fail the test (it warns and carries on for an unknown key or a bad value).
string(REGEX MATCHALL "[^\n]*gpumemd\\.(service|socket)[^\n]*" complaints "${out}\n${err}")
if(NOT status EQUAL 0 OR complaints)
  message(FATAL_ERROR "systemd-analyze verify (exit status ${status}):\n${out}\n${err}")
endif()
message("systemd-analyze verify: gpumemd.socket and gpumemd.service are clean")
