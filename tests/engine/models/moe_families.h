// The tiny mixture-of-experts folders of tests/data that moe_test and
// moe_folder_test load: their reference vectors come from
// tests/reference/moe_reference.py.
#ifndef FCA_TESTS_ENGINE_MODELS_MOE_FAMILIES_H_
#define FCA_TESTS_ENGINE_MODELS_MOE_FAMILIES_H_

#include <cstdint>
#include <string>

namespace fca::engine::testing {

struct Family {
  std::string dir;
  int64_t layers, experts, top_k;
  bool shared;  // qwen2_moe's shared expert
};
inline const Family kOlmoe{FCA_TEST_DATA_DIR "/olmoe-tiny", 2, 8, 2, false};
inline const Family kQwen{FCA_TEST_DATA_DIR "/qwen2-moe-tiny", 2, 6, 2, true};
inline const Family kMixtral{FCA_TEST_DATA_DIR "/mixtral-tiny", 2, 4, 2, false};

}  // namespace fca::engine::testing

#endif  // FCA_TESTS_ENGINE_MODELS_MOE_FAMILIES_H_
