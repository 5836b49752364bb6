// The version of this build: `git describe --tags --always --dirty` of the
// source tree at build time (e.g. "v0.2-14-g9a75d15-dirty", or a bare commit
// hash when there is no tag), or the project version when the tree was
// built without git. Recorded with every audit (docs/fca.md
// "Reproducibility") and served by GetServerInfo.
#ifndef FCA_COMMON_BUILD_VERSION_H_
#define FCA_COMMON_BUILD_VERSION_H_

namespace fca {

const char* BuildVersion();

}  // namespace fca

#endif  // FCA_COMMON_BUILD_VERSION_H_
