#include "model/ulysses.hpp"

#include "comm/all_to_all_autograd.hpp"
#include "core/error.hpp"

namespace ulysses::model {

torch::Tensor scatter_heads_gather_sequence(comm::Communicator& sp, const torch::Tensor& x) {
  const std::int64_t P = sp.size(), B = x.size(0), s = x.size(1), h = x.size(2), D = x.size(3);   // s = S/P
  ULY_CHECK(h % P == 0, "heads ({}) must be divisible by the SP degree ({})", h, P);
  auto send = x.reshape({B, s, P, h / P, D})                 // [B, S/P, H, D] -> [B, S/P, P, H/P, D]
                  .permute({2, 0, 1, 3, 4})               // -> [P, B, S/P, H/P, D]: chunk j goes to rank j
                  .contiguous();
  auto recv = comm::all_to_all_autograd(sp, send);        // [P, B, S/P, H/P, D]: chunk j = rank j's tokens
  return recv.permute({1, 0, 2, 3, 4})                    // -> [B, P, S/P, H/P, D]
      .reshape({B, P * s, h / P, D});                     // -> [B, S, H/P, D]
}

torch::Tensor scatter_sequence_gather_heads(comm::Communicator& sp, const torch::Tensor& x) {
  const std::int64_t P = sp.size(), B = x.size(0), S = x.size(1), hp = x.size(2), D = x.size(3);   // hp = H/P
  ULY_CHECK(S % P == 0, "sequence length ({}) must be divisible by the SP degree ({})", S, P);
  auto send = x.reshape({B, P, S / P, hp, D})                // [B, S, H/P, D] -> [B, P, S/P, H/P, D]
                  .permute({1, 0, 2, 3, 4})               // -> [P, B, S/P, H/P, D]: chunk j goes to rank j
                  .contiguous();
  auto recv = comm::all_to_all_autograd(sp, send);        // [P, B, S/P, H/P, D]: chunk j = rank j's heads
  return recv.permute({1, 2, 0, 3, 4})                    // -> [B, S/P, P, H/P, D]
      .reshape({B, S / P, P * hp, D});                    // -> [B, S/P, H, D]
}

torch::Tensor replicate_kv_heads_for_sp(const torch::Tensor& kv, std::int64_t sp) {
  const std::int64_t kv_heads = kv.size(2);
  if (kv_heads >= sp) return kv;
  ULY_CHECK(sp % kv_heads == 0, "SP degree ({}) must be a multiple of the kv heads ({})", sp, kv_heads);
  return kv.repeat_interleave(sp / kv_heads, /*dim=*/2);  // [B, S/P, Hkv, D] -> [B, S/P, P, D]
}

}  // namespace ulysses::model
