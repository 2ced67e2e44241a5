# Checks deploy/'s systemd units: `systemd-analyze verify` (unknown keys, bad values, a socket
# the service does not name) and `systemd-analyze security --offline=true` (the sandbox's
# exposure, at most MAX_EXPOSURE). The templates are configured as an install configures them
# (cmake/packaging.cmake), with the built daemon as ExecStart, which verify wants to exist.
# Run by CTest with -DSOURCE_DIR, -DDAEMON, -DWORK_DIR, -DMAX_EXPOSURE; prints SKIPPED where
# systemd-analyze is missing.
find_program(SYSTEMD_ANALYZE systemd-analyze)
if(NOT SYSTEMD_ANALYZE)
  message("SKIPPED: systemd-analyze is not installed (Debian package systemd)")
  return()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
get_filename_component(CMAKE_INSTALL_FULL_BINDIR ${DAEMON} DIRECTORY)
set(CMAKE_INSTALL_FULL_SYSCONFDIR /etc)
set(GPUMEM_FULL_DOCDIR ${SOURCE_DIR})
foreach(unit IN ITEMS gpumemd.service gpumemd.socket)
  configure_file(${SOURCE_DIR}/deploy/${unit}.in ${WORK_DIR}/${unit} @ONLY)
endforeach()
file(STRINGS ${WORK_DIR}/gpumemd.service exec_start REGEX "^ExecStart=")
if(NOT exec_start MATCHES "^ExecStart=${DAEMON} ")
  message(FATAL_ERROR "the configured unit does not start the daemon it was given: ${exec_start}")
endif()

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

# --offline reads the file alone, without a running systemd (systemd 252 and later); older
# ones can only rate a loaded unit.
execute_process(COMMAND ${SYSTEMD_ANALYZE} security --offline=true --no-pager
                        --threshold=100 ./gpumemd.service
                WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
string(REGEX MATCH "Overall exposure level for gpumemd.service: ([0-9.]+)" score_line "${out}")
if(NOT score_line)
  if(err MATCHES "offline")
    message("SKIPPED: this systemd-analyze cannot rate a unit offline:\n${err}")
    return()
  endif()
  message(FATAL_ERROR "systemd-analyze security (exit status ${status}):\n${out}\n${err}")
endif()
message("${out}")
if(CMAKE_MATCH_1 GREATER MAX_EXPOSURE)
  message(FATAL_ERROR "gpumemd.service is exposed at ${CMAKE_MATCH_1}, above ${MAX_EXPOSURE}")
endif()
message("systemd-analyze security: gpumemd.service at ${CMAKE_MATCH_1} (at most ${MAX_EXPOSURE})")
