# ctest's slots: scripts/test.sh runs ctest with two slots per core it may
# use (-j twice scripts/build_jobs.sh). A test that keeps a core busy takes
# both (PROCESSORS 2, the default fca_test_slots gives); a test that mostly
# waits (a timeout, a lease, a server's answer) says PROCESSORS 1 where it is
# added, and two of them run beside one busy test instead of leaving a core
# idle. On the 2-core machine ctest took 298 s twice against 333 and 305 s
# at one test per core (docs/developing.md, "Test").

# Gives every test of the calling directory without a PROCESSORS of its own
# both slots of a core. Called at the end of each CMakeLists.txt that adds
# tests: CMake before 3.28 sets a test's properties only in its directory.
function(fca_test_slots)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    get_test_property(${test} PROCESSORS processors)
    if(NOT processors)
      set_tests_properties(${test} PROPERTIES PROCESSORS 2)
    endif()
  endforeach()
endfunction()
