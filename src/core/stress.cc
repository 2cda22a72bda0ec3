// The built-in stress suite: each case isolates one mechanism (shared key or query components, ties at the
// row max, sharp or long rows, masking, GQA). Exercised by tests/core/stress_test.cc and `gproj check`.
#include "gproj/stress.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "gproj/error.h"
#include "gproj/synthetic.h"

namespace gproj {

namespace {

// Adds `scale` * (a second random direction) to every key: with make_synthetic's first shared direction the
// shared part has rank 2.
void add_second_key_direction(AttentionState& st, float scale, uint64_t seed) {
  const int64_t D = st.k.shape[3];
  for (int64_t b = 0; b < st.k.shape[0]; ++b)
    for (int64_t n = 0; n < st.k.shape[1]; ++n)
      for (int64_t h = 0; h < st.k.shape[2]; ++h)
        for (int64_t e = 0; e < D; ++e) {
          const float x = st.k.at(b, n, h, e).to_float() + scale * static_cast<float>(gaussian(seed, e));
          st.k.at(b, n, h, e) = bf16::from_float(x);
        }
}

// Makes keys 0..copies-1 of every kv head identical to key 0 and points every query at it: the row max is
// tied exactly between those keys, at a positive value (sign = +1) or a negative one (sign = -1, where all
// other keys are pushed further below).
// rest_mix > 0 (positive ties only): every non-sink key becomes rest_mix k0 + (1 - rest_mix) k_j, so with
// large q_scale the other keys still score within a few units of the tied sink (dQ is not degenerate).
void tie_rows(AttentionState& st, int copies, float sign, uint64_t seed, float q_scale = 0.5f, float rest_mix = 0.0f) {
  const int64_t D = st.k.shape[3], group = st.q.shape[2] / st.k.shape[2];
  for (int64_t b = 0; b < st.k.shape[0]; ++b)
    for (int64_t hk = 0; hk < st.k.shape[2]; ++hk) {
      for (int64_t j = 1; j < copies; ++j)
        for (int64_t e = 0; e < D; ++e) st.k.at(b, j, hk, e) = st.k.at(b, 0, hk, e);
      if (rest_mix > 0.0f) {
        for (int64_t j = copies; j < st.k.shape[1]; ++j)
          for (int64_t e = 0; e < D; ++e)
            st.k.at(b, j, hk, e) = bf16::from_float(rest_mix * st.k.at(b, 0, hk, e).to_float() +
                                                    (1.0f - rest_mix) * st.k.at(b, j, hk, e).to_float());
      }
      if (sign < 0) {  // every non-sink key gets -3 * k0: scores q.k_j ~ -3 |k0|^2 / 2, below the sink's
        for (int64_t j = copies; j < st.k.shape[1]; ++j)
          for (int64_t e = 0; e < D; ++e)
            st.k.at(b, j, hk, e) =
                bf16::from_float(st.k.at(b, j, hk, e).to_float() - 3.0f * st.k.at(b, 0, hk, e).to_float());
      }
      for (int64_t g = 0; g < group; ++g)
        for (int64_t i = 0; i < st.q.shape[1]; ++i)
          for (int64_t e = 0; e < D; ++e) {
            const float k0 = st.k.at(b, 0, hk, e).to_float();
            const float noise = 0.05f * static_cast<float>(gaussian(seed, (i * D + e) * 131 + g));
            st.q.at(b, i, hk * group + g, e) = bf16::from_float(sign * (q_scale * k0 + noise));
          }
    }
}

AttentionState with(SyntheticSpec s, const std::function<void(AttentionState&)>& edit = {}) {
  AttentionState st = make_synthetic(s);
  if (edit) edit(st);
  st.provenance["source"] = "gproj stress suite";
  return st;
}

std::vector<StressCase> build_synthetic() {
  std::vector<StressCase> c;
  c.push_back({"shared-keys", "synthetic",
               "keys share a large rank-2 component (16x and 8x the noise): r_i of bf16(dS) leaks into dQ",
               [] {
                 SyntheticSpec s = synthetic_spec(1024, 1024, 4, 4, 64, false, 101);
                 s.shared_key = 16.0f;
                 return with(s, [](AttentionState& st) { add_second_key_direction(st, 8.0f, 102); });
               }});
  c.push_back({"shared-keys-causal-gqa", "synthetic",
               "shared key component, causal, GQA (8 query heads on 2 kv heads), D = 128", [] {
                 SyntheticSpec s = synthetic_spec(512, 512, 8, 2, 128, true, 111);
                 s.shared_key = 16.0f;
                 return with(s);
               }});
  c.push_back({"shared-queries", "synthetic",
               "queries share a large component: the column sums of dS carry it into dK", [] {
                 SyntheticSpec s = synthetic_spec(1024, 1024, 4, 4, 64, true, 121);
                 s.shared_query = 16.0f;
                 return with(s);
               }});
  c.push_back({"sink-ties-positive", "synthetic",
               "attention sink: 4 identical keys tie exactly at a positive row max; V has mean -1", [] {
                 SyntheticSpec s = synthetic_spec(512, 512, 4, 4, 64, true, 131);
                 s.v_mean = -1.0f;
                 return with(s, [](AttentionState& st) { tie_rows(st, 4, 1.0f, 132); });
               }});
  c.push_back({"sink-ties-large", "synthetic",
               "4 identical keys tie at row maxima near 100 (others ~90 +- 1): the published fwdfix lift underflows", [] {
                 SyntheticSpec s = synthetic_spec(512, 512, 4, 4, 64, true, 133);
                 s.v_mean = -1.0f;
                 return with(s, [](AttentionState& st) { tie_rows(st, 4, 1.0f, 134, 12.5f, 0.9f); });
               }});
  c.push_back({"ties-negative", "synthetic", "4 identical keys tie exactly at a negative row max", [] {
                 SyntheticSpec s = synthetic_spec(512, 512, 4, 4, 64, false, 141);
                 return with(s, [](AttentionState& st) { tie_rows(st, 4, -1.0f, 142); });
               }});
  c.push_back({"sharp-rows", "synthetic", "scores 4x sharper (queries scaled by 4): near one-hot softmax rows", [] {
                 SyntheticSpec s = synthetic_spec(1024, 1024, 4, 4, 64, true, 151);
                 s.q_std = 4.0f;
                 return with(s);
               }});
  c.push_back({"long-rows", "synthetic", "8192 keys per row (Nq = 128, causal, bottom-right aligned)", [] {
                 return with(synthetic_spec(128, 8192, 2, 2, 64, true, 161));
               }});
  c.push_back({"cross-mqa", "synthetic", "Nq != Nk (97 x 1025), MQA (4 query heads on 1 kv head)", [] {
                 return with(synthetic_spec(97, 1025, 4, 1, 64, false, 171));
               }});
  c.push_back({"masked-rows", "synthetic", "causal with Nq > Nk: the first 100 query rows see no key", [] {
                 return with(synthetic_spec(300, 200, 2, 2, 64, true, 181));
               }});
  c.push_back({"random-d128", "synthetic", "plain random inputs, D = 128, causal: the control case", [] {
                 return with(synthetic_spec(1024, 1024, 2, 2, 128, true, 191));
               }});
  c.push_back({"sharp-rows-d128", "synthetic",
               "scores 4x sharper at D = 128, not causal: rows of several large entries on the D = 128 kernels", [] {
                 SyntheticSpec s = synthetic_spec(1024, 1024, 2, 2, 128, false, 201);
                 s.q_std = 4.0f;
                 return with(s);
               }});
  return c;
}

}  // namespace

const std::vector<StressCase>& synthetic_stress_cases() {
  static const std::vector<StressCase> cases = build_synthetic();
  return cases;
}

std::vector<StressCase> real_stress_cases(const std::string& data_dir) {
  std::vector<StressCase> c;
  const struct {
    const char* name;
    const char* file;
    const char* what;
  } files[] = {
      {"real-step5000-layer3", "real_step5000_layer3.safetensors",
       "captured BF16 training state, byte-level GPT step 5000 layer 3 (batch 0, heads 0-3)"},
      {"real-step1000-layer4", "real_step1000_layer4.safetensors",
       "captured BF16 training state, byte-level GPT step 1000 layer 4 (batch 0, heads 0-3)"},
  };
  for (const auto& f : files) {
    const std::string path = (std::filesystem::path(data_dir) / f.file).string();
    if (!std::filesystem::exists(path)) continue;
    c.push_back({f.name, "real", f.what, [path] { return load_state(path); }});
  }
  return c;
}

std::string default_data_dir() {
  if (const char* env = std::getenv("GPROJ_DATA_DIR")) return env;
  return GPROJ_SOURCE_DATA_DIR;
}

std::vector<StressCase> stress_suite(const std::string& data_dir, const std::vector<std::string>& only) {
  std::vector<StressCase> all = synthetic_stress_cases();
  for (StressCase& c : real_stress_cases(data_dir)) all.push_back(std::move(c));
  if (only.empty()) return all;
  std::vector<StressCase> kept;
  for (const std::string& want : only) {
    bool matched = false;
    for (const StressCase& c : all) {
      if (c.name == want || c.group == want) {
        matched = true;
        bool already = false;
        for (const StressCase& k : kept) already = already || k.name == c.name;
        if (!already) kept.push_back(c);
      }
    }
    if (!matched) {
      std::string names;
      for (const StressCase& c : all) names += (names.empty() ? "" : ", ") + c.name;
      throw Error(ErrorCode::kInvalidArgument, "no stress case or group named '" + want + "' (cases: " + names +
                                                   "; groups: synthetic, real)");
    }
  }
  return kept;
}

}  // namespace gproj
