// `gproj study`: every projection of the gproj variant on each state, errors against the float64 oracle.
// Exercised by docs/gproj-projection.md; prints Markdown so the table can be pasted as it is.
#include "cli/study.h"

#include <fmt/core.h>

#include <utility>

#include "gproj/evaluate.h"
#include "gproj/synthetic.h"

namespace gproj {

int run_study(const StudyOptions& o, std::FILE* out) {
  std::vector<std::pair<std::string, AttentionState>> cases;
  for (const std::string& path : o.states) cases.emplace_back(path, load_state(path));
  if (o.synthetic) {
    SyntheticSpec shared;
    shared.Nq = shared.Nk = 1024;
    shared.H = shared.Hkv = 4;
    shared.shared_key = 8.0f;
    shared.seed = 11;
    cases.emplace_back("synthetic shared-key (N=1024, H=4, D=64)", make_synthetic(shared));
    SyntheticSpec random = shared;
    random.shared_key = 0.0f;
    random.causal = true;
    cases.emplace_back("synthetic random causal (N=1024, H=4, D=64)", make_synthetic(random));
  }
  fmt::print(out, "| case | variant / projection | dQ | dK | dV | max abs r after | dK col-sum ratio | bwd s |\n");
  fmt::print(out, "|---|---|---|---|---|---|---|---|\n");
  for (const auto& entry : cases) {
    const std::string& name = entry.first;  // named copies: lambdas may not capture structured bindings in C++17
    const AttentionState& state = entry.second;
    fmt::print(stderr, "[study] {}: oracle ...\n", name);
    const OracleRun oracle = run_oracle(state);
    auto row = [&](FlashParams p, const std::string& label) {
      p.block_q = p.block_k = o.block;
      if (p.projection == Projection::kLowRank || p.projection == Projection::kTopKLowRank ||
          p.projection == Projection::kThreshLowRank || p.projection == Projection::kFp16LowRank) {
        p.lowrank_rank = o.lowrank_rank;
      }
      const VariantRun r = run_variant(state, p, oracle);
      fmt::print(out, "| {} | {} | {:.3f}% | {:.3f}% | {:.3f}% | {:.2e} | {:.2e} | {:.2f} |\n", name, label,
                 100 * r.dq.rel_fro, 100 * r.dk.rel_fro, 100 * r.dv.rel_fro, r.bwd.diag.rowsum_max_after,
                 r.bwd.diag.dk_colsum_ratio, r.seconds_backward);
      std::fflush(out);
    };
    for (Variant v : {Variant::kFp32, Variant::kBaseline}) {
      FlashParams p;
      p.variant = v;
      row(p, variant_name(v));
    }
    for (Projection proj : all_projections()) {
      if (proj == Projection::kNone) continue;
      FlashParams p;
      p.variant = Variant::kGproj;
      p.projection = proj;
      if (proj != Projection::kTopK && proj != Projection::kTopKRest && proj != Projection::kTopKLowRank &&
          proj != Projection::kThreshLowRank) {
        const bool ranked = proj == Projection::kLowRank || proj == Projection::kFp16LowRank;
        row(p, std::string("gproj / ") + projection_name(proj) +
                   (ranked ? " r=" + std::to_string(o.lowrank_rank) : ""));
        continue;
      }
      for (int k : o.topk) {
        p.topk = k;
        p.thresh_k = k;
        const bool has_basis = proj == Projection::kTopKLowRank || proj == Projection::kThreshLowRank;
        for (int stride : has_basis ? o.basis_strides : std::vector<int>{1}) {
          p.basis_key_stride = stride;
          const std::string basis = has_basis ? (stride > 1 ? " basis 1/" + std::to_string(stride) + " of keys"
                                                             : " basis all keys")
                                              : "";
          row(p, std::string("gproj / ") + projection_name(proj) + " k=" + std::to_string(k) + basis);
        }
      }
    }
  }
  return 0;
}

}  // namespace gproj
