# Runs one GoogleTest executable with every gpumemd it starts under the service unit's
# sandbox (tests/sandbox/unit_sandbox, enforcing: a call the unit forbids kills the daemon or
# fails as it would under systemd), then checks the sandbox's report: a report per daemon, and
# no refusal. Run by CTest with -DTEST, -DSANDBOX, -DUNIT, -DSYSCALLS, -DWORK_DIR, and
# -DEXPECTED_REFUSAL=CALL where the list leaves CALL out on purpose: then some daemon must have
# been refused CALL, and nothing else. Prints
# SKIPPED where the sandbox cannot be built: it needs root (namespaces, a /proc mount).
execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT uid STREQUAL "0")
  message("SKIPPED: the unit's sandbox needs root here (network and mount namespaces)")
  return()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(report ${WORK_DIR}/report.txt)
file(WRITE ${report} "")
set(ENV{GPUMEM_TEST_DAEMON_WRAPPER}
    "${SANDBOX} --unit ${UNIT} --syscalls ${SYSCALLS} --report ${report} --")
execute_process(COMMAND ${TEST} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
file(READ ${report} sandbox_report)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${TEST} failed under the sandbox:\n${out}\nsandbox report:\n${sandbox_report}")
endif()
string(REGEX MATCHALL "[^\n]*: (refused|would refuse) [^\n]*" refusals "${sandbox_report}")
set(expected_refusals "")
if(EXPECTED_REFUSAL)
  set(expected_refusals ${refusals})
  list(FILTER expected_refusals INCLUDE REGEX ": refused system call ${EXPECTED_REFUSAL} x")
  list(FILTER refusals EXCLUDE REGEX ": refused system call ${EXPECTED_REFUSAL} x")
  if(NOT expected_refusals)
    message(FATAL_ERROR "no daemon was refused ${EXPECTED_REFUSAL}:\n${sandbox_report}")
  endif()
endif()
if(refusals)
  message(FATAL_ERROR "the sandbox refused calls:\n${sandbox_report}")
endif()
string(REGEX MATCHALL "nothing refused" clean "${sandbox_report}")
list(LENGTH clean daemons)
list(LENGTH expected_refusals refused_as_expected)
math(EXPR daemons "${daemons} + ${refused_as_expected}")
if(daemons EQUAL 0)
  message(FATAL_ERROR "no daemon ran under the sandbox (GPUMEM_TEST_DAEMON_WRAPPER unused?)")
endif()
if(EXPECTED_REFUSAL)
  message("${daemons} gpumemd(s) ran under ${UNIT}'s sandbox, ${refused_as_expected} refused "
          "${EXPECTED_REFUSAL} as expected and nothing else")
else()
  message("${daemons} gpumemd(s) ran under ${UNIT}'s sandbox and nothing was refused")
endif()
