# What an operator's machine needs beyond the programs and libraries (systemd units, the
# sysusers and tmpfiles snippets, the default configuration, man pages, the README and the
# license), and the Debian packages built from all of it with `cpack -G DEB` in the build folder:
#
#   gpumemd         component daemon       gpumemd, gpumemctl, units, configuration, man pages
#   libgpumem0      component runtime      libgpumem.so.0 (its SONAME)
#   libgpumem-dev   component development  headers, libgpumem.a, the CMake package, gpumem.pc
#   python3-gpumem  component python       the Python package, when python/ builds it
#
# Included at the end of the top CMakeLists.txt, once every install rule exists.

set(GPUMEM_PACKAGE_RELEASE 1 CACHE STRING "Debian revision of the packages (the -N of 0.1.0-N)")
set(GPUMEM_PACKAGE_MAINTAINER "gpumem maintainers <maintainers@gpumem.example>" CACHE STRING
  "Maintainer field of the Debian packages and their changelog")
set(GPUMEM_DEBIAN_VERSION ${PROJECT_VERSION}-${GPUMEM_PACKAGE_RELEASE})

set(GPUMEM_PACKAGES gpumemd libgpumem0 libgpumem-dev)
set(GPUMEM_PACKAGE_COMPONENTS daemon runtime development)
if(GPUMEM_WITH_PYTHON)
  list(APPEND GPUMEM_PACKAGES python3-gpumem)
  list(APPEND GPUMEM_PACKAGE_COMPONENTS python)
endif()

set(GPUMEM_DOC_DIR ${CMAKE_INSTALL_DATADIR}/doc/gpumemd)
set(staged ${PROJECT_BINARY_DIR}/packaging)

# The default configuration is what gpumemd itself prints, so it names every key the daemon
# knows, at its default.
add_custom_command(OUTPUT ${staged}/gpumemd.yaml
  COMMAND gpumemd --print-default-config > ${staged}/gpumemd.yaml
  DEPENDS gpumemd VERBATIM)

# Debian wants man pages and changelogs compressed, and reproducibly (gzip -n: no name, no time).
set(compressed ${staged}/gpumemd.yaml)
file(GLOB GPUMEM_MAN_PAGES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/man/*.[0-9])
foreach(page IN LISTS GPUMEM_MAN_PAGES)
  get_filename_component(name ${page} NAME)
  string(REGEX REPLACE ".*\\.([0-9])$" "\\1" section ${name})
  add_custom_command(OUTPUT ${staged}/man/${name}.gz
    COMMAND ${CMAKE_COMMAND} -E make_directory ${staged}/man
    COMMAND gzip -9n -c ${page} > ${staged}/man/${name}.gz
    DEPENDS ${page} VERBATIM)
  list(APPEND compressed ${staged}/man/${name}.gz)
  install(FILES ${staged}/man/${name}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section}
    COMPONENT daemon)
endforeach()

# Every package carries a copyright file and a changelog (lintian requires both). The copyright
# file names the license (LICENSE) and points at Debian's copy of its text, as Debian wants for
# Apache-2.0 (lintian refuses the full text there). The changelog's date is SOURCE_DATE_EPOCH's where set, for reproducible packages.
string(TIMESTAMP GPUMEM_PACKAGE_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/changelog.in ${staged}/changelog @ONLY)
add_custom_command(OUTPUT ${staged}/changelog.Debian.gz
  COMMAND gzip -9n -c ${staged}/changelog > ${staged}/changelog.Debian.gz
  DEPENDS ${staged}/changelog VERBATIM)
list(APPEND compressed ${staged}/changelog.Debian.gz)
add_custom_target(gpumem_package_files ALL DEPENDS ${compressed})

foreach(package component IN ZIP_LISTS GPUMEM_PACKAGES GPUMEM_PACKAGE_COMPONENTS)
  install(FILES ${staged}/changelog.Debian.gz DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package}
    COMPONENT ${component})
  install(FILES deploy/debian/copyright DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package}
    COMPONENT ${component})
endforeach()
install(FILES README.md DESTINATION ${GPUMEM_DOC_DIR} COMPONENT daemon)
install(FILES deploy/gpumemd.example.yaml deploy/metrics-http.conf
  DESTINATION ${CMAKE_INSTALL_DATADIR}/gpumem COMPONENT daemon)
install(FILES deploy/sysusers.conf DESTINATION lib/sysusers.d RENAME gpumemd.conf
  COMPONENT daemon)

# The units, the tmpfiles snippet and the configuration name installed paths, so they are
# configured when they are installed, for the prefix they are installed under: cpack installs
# for /usr (then /etc) into its staging folder, `cmake --install --prefix P` anywhere.
# CMAKE_INSTALL_FULL_SYSCONFDIR follows GNUInstallDirs: /etc for the prefix /usr.
install(CODE "
  set(prefix \"\${CMAKE_INSTALL_PREFIX}\")
  set(CMAKE_INSTALL_FULL_BINDIR \"\${prefix}/${CMAKE_INSTALL_BINDIR}\")
  set(GPUMEM_FULL_DOCDIR \"\${prefix}/${GPUMEM_DOC_DIR}\")
  if(IS_ABSOLUTE \"${CMAKE_INSTALL_SYSCONFDIR}\")
    set(CMAKE_INSTALL_FULL_SYSCONFDIR \"${CMAKE_INSTALL_SYSCONFDIR}\")
  elseif(prefix STREQUAL \"/usr\")
    set(CMAKE_INSTALL_FULL_SYSCONFDIR /etc)
  else()
    set(CMAKE_INSTALL_FULL_SYSCONFDIR \"\${prefix}/${CMAKE_INSTALL_SYSCONFDIR}\")
  endif()
  foreach(file IN ITEMS gpumemd.service gpumemd.socket tmpfiles.conf)
    configure_file(\"${PROJECT_SOURCE_DIR}/deploy/\${file}.in\" \"${staged}/\${file}\" @ONLY)
  endforeach()
  file(INSTALL \"${staged}/gpumemd.service\" \"${staged}/gpumemd.socket\"
    DESTINATION \"\${prefix}/lib/systemd/system\")
  file(INSTALL \"${staged}/tmpfiles.conf\" DESTINATION \"\${prefix}/lib/tmpfiles.d\"
    RENAME gpumemd.conf)
  file(INSTALL \"${staged}/gpumemd.yaml\"
    DESTINATION \"\${CMAKE_INSTALL_FULL_SYSCONFDIR}/gpumemd\")
" COMPONENT daemon)

set(CPACK_PACKAGE_NAME gpumem)
set(CPACK_PACKAGE_VENDOR gpumem)
set(CPACK_PACKAGE_CONTACT ${GPUMEM_PACKAGE_MAINTAINER})
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
set(CPACK_GENERATOR DEB)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL ${GPUMEM_PACKAGE_COMPONENTS})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${GPUMEM_PACKAGE_RELEASE})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME gpumemd)
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION admin)
# The maintainer scripts create the user with systemd-sysusers and the folders with
# systemd-tmpfiles (systemd, or their standalone packages in a container), and enable the
# units with deb-systemd-helper.
set(CPACK_DEBIAN_DAEMON_PACKAGE_DEPENDS
  "systemd | systemd-standalone-sysusers | systemd-sysusers, systemd | systemd-standalone-tmpfiles, init-system-helpers (>= 1.54~)")
set(CPACK_DEBIAN_DAEMON_PACKAGE_SUGGESTS "libgpumem-dev")
set(CPACK_COMPONENT_DAEMON_DESCRIPTION "multi-process GPU and host memory daemon
gpumemd shares GPU memory (CUDA memory pools and reservations) and host
memory between the processes of a node, with named buffers, locks, barriers
and channels that survive the death of a process and a restart of the
daemon. gpumemctl is its operator's tool.

The package runs gpumemd as a hardened systemd service with socket
activation; members of group gpumem may connect.")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
  ${PROJECT_SOURCE_DIR}/deploy/debian/postrm ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libgpumem0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
# The shlibs file tells dpkg-shlibdeps of the packages built against libgpumem which package
# provides libgpumem.so.0 (CPack makes one for every package with a SONAME: this one alone).
# ldconfig runs by trigger, once per dpkg run (lintian requires it); CPack's own postinst and
# postrm call it too, which lintian only warns of.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
configure_file(deploy/debian/libgpumem0.triggers ${staged}/libgpumem0/triggers COPYONLY)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${staged}/libgpumem0/triggers)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "client library of gpumemd
libgpumem connects a process to gpumemd, the node's GPU and host memory
daemon: shared named buffers, reservations, locks, barriers and channels,
from C++ or C.")

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libgpumem-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS "libgpumem0 (= ${GPUMEM_DEBIAN_VERSION})")
set(CPACK_COMPONENT_DEVELOPMENT_DESCRIPTION "client library of gpumemd: development files
The headers of libgpumem's C++ and C API (and gpumem/device.cuh for CUDA
kernels), the static library, the CMake package (find_package(gpumem)) and
gpumem.pc for pkg-config.")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-gpumem)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
if(GPUMEM_WITH_PYTHON)
  # The module is built for this interpreter's version only.
  execute_process(COMMAND ${Python_EXECUTABLE} -c
    "import sys; print('%d.%d;%d.%d' % (sys.version_info[0], sys.version_info[1], sys.version_info[0], sys.version_info[1] + 1))"
    OUTPUT_VARIABLE python_versions OUTPUT_STRIP_TRAILING_WHITESPACE)
  list(GET python_versions 0 python_this)
  list(GET python_versions 1 python_next)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS "python3 (>= ${python_this}~), python3 (<< ${python_next})")
endif()
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "Python client of gpumemd
The gpumem Python package: buffers shared through gpumemd as DLPack, the
buffer protocol and __cuda_array_interface__ (NumPy, PyTorch, CuPy, JAX),
reservations, locks, barriers and channels.")

include(CPack)
