# Installs the build into a fresh prefix and builds a consumer against it, with CMake's
# find_package and with pkg-config, and a C consumer linked against libgpumem.a alone with
# `pkg-config --static --libs` (Libs.private complete). Run by CTest with -DBUILD_DIR, -DSOURCE_DIR, -DWORK_DIR.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGV}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install_consumer -B ${WORK_DIR}/consumer
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/consumer_static)
execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${WORK_DIR}/prefix/lib
                ${WORK_DIR}/consumer/consumer RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "the consumer linked to the shared library failed")
endif()
find_program(PKG_CONFIG pkg-config REQUIRED)
execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${WORK_DIR}/prefix/lib/pkgconfig
                ${PKG_CONFIG} --cflags --libs gpumem OUTPUT_VARIABLE flags RESULT_VARIABLE status
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "pkg-config does not know gpumem")
endif()
separate_arguments(flags)
run(c++ -std=c++20 ${SOURCE_DIR}/tests/install_consumer/main.cpp ${flags}
    -Wl,-rpath,${WORK_DIR}/prefix/lib -o ${WORK_DIR}/consumer_pc)
run(${WORK_DIR}/consumer_pc)
# Debian 12's clang (14) lacks std::source_location, which the public headers once used.
find_program(CLANGXX clang++)
if(CLANGXX)
  run(${CLANGXX} -std=c++20 -Wall -Wextra -Werror ${SOURCE_DIR}/tests/install_consumer/main.cpp
      ${flags} -Wl,-rpath,${WORK_DIR}/prefix/lib -o ${WORK_DIR}/consumer_clang)
  run(${WORK_DIR}/consumer_clang)
else()
  message("clang++ is not installed: the consumer was not built with clang")
endif()

# -l:libgpumem.a: the archive, though libgpumem.so lies beside it; the rest is Libs.private.
execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${WORK_DIR}/prefix/lib/pkgconfig
                ${PKG_CONFIG} --static --cflags --libs gpumem OUTPUT_VARIABLE static_flags
                RESULT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "pkg-config --static does not know gpumem")
endif()
string(REPLACE "-lgpumem" "-l:libgpumem.a" static_flags "${static_flags}")
separate_arguments(static_flags)
run(cc -std=c11 ${SOURCE_DIR}/tests/install_consumer/consumer.c ${static_flags}
    -o ${WORK_DIR}/consumer_c_static)
run(${WORK_DIR}/consumer_c_static)
execute_process(COMMAND readelf -d ${WORK_DIR}/consumer_c_static OUTPUT_VARIABLE dynamic)
if(dynamic MATCHES "libgpumem")
  message(FATAL_ERROR "the static C consumer needs libgpumem.so:\n${dynamic}")
endif()
