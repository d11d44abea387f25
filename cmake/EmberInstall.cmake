# Installation: headers under include/ember/..., the library, and the CMake package files so
# that find_package(Ember) + target_link_libraries(app Ember::ember) works from any prefix.
include(CMakePackageConfigHelpers)

# The public headers only (EMBER_PUBLIC_HEADERS), under include/ember/ with their folders.
foreach(h ${EMBER_PUBLIC_HEADERS})
  get_filename_component(_dir ${h} DIRECTORY)
  install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ember/${_dir})
endforeach()

set(_ember_targets ember ember_warnings)
if(TARGET ember_cuda)
  list(APPEND _ember_targets ember_cuda)  # found at run time next to libember
endif()
install(TARGETS ${_ember_targets} EXPORT EmberTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT EmberTargets NAMESPACE Ember:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Ember)
# The MPI module: found at run time next to libember, never linked by consumers, so not in the
# exported targets (find_package(Ember) neither needs nor offers it).
if(TARGET ember_mpi)
  install(TARGETS ember_mpi LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
configure_package_config_file(cmake/EmberConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/EmberConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Ember)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/EmberConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/EmberConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/EmberConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Ember)
