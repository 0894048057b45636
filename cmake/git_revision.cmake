# Writes OUT: `#define KVTIER_GIT_REVISION "<revision>"`, the revision of the
# tree at SOURCE_DIR ("-dirty" when it has uncommitted changes, "unknown"
# outside a git checkout). Run at every build (engine/CMakeLists.txt); the
# file is rewritten only when the revision changed, so an unchanged tree
# recompiles nothing.
execute_process(COMMAND git describe --always --dirty --abbrev=12 --exclude "*"
                WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR revision STREQUAL "")
  set(revision "unknown")
endif()
set(text "#define KVTIER_GIT_REVISION \"${revision}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
