// Symmetric windows for virtual ranks: R ranks on one GPU, their windows consecutive slices of one allocation,
// addressed through VirtualPeers (device/comm/peers.hpp).
#pragma once

#include <cstdint>
#include <memory>

#include "device/comm/peers.hpp"
#include "device/layout/transport_layout.hpp"
#include "mok/status.hpp"

namespace mok::comm {

class VirtualWindows {
  public:
    // Allocates and zeroes ep_size windows of layout.window_bytes on the current device.
    static Status create(const layout::SymmetricLayout& layout, int32_t ep_size, std::unique_ptr<VirtualWindows>* out);
    ~VirtualWindows();
    VirtualWindows(const VirtualWindows&) = delete;
    VirtualWindows& operator=(const VirtualWindows&) = delete;

    VirtualPeers peers(int32_t rank) const { return VirtualPeers{base_, window_bytes_, rank, ep_size_}; }
    char* window(int32_t rank) const { return base_ + static_cast<uint64_t>(rank) * window_bytes_; }
    int32_t ep_size() const { return ep_size_; }

  private:
    VirtualWindows(char* base, uint64_t window_bytes, int32_t ep_size)
        : base_(base), window_bytes_(window_bytes), ep_size_(ep_size) {}

    char* base_;
    uint64_t window_bytes_;
    int32_t ep_size_;
};

}  // namespace mok::comm
