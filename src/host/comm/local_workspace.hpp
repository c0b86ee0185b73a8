// A rank's local block (layout::LocalLayout): its plan tables, token rings, ring flags, control words and
// DeviceStatus, in ordinary device memory of the current CUDA device.
#pragma once

#include <memory>

#include "device/layout/transport_layout.hpp"
#include "mok/status.hpp"

namespace mok::comm {

class LocalWorkspace {
  public:
    // Allocates and zeroes the block on the current device (zero is every flag's and counter's initial value).
    static Status create(const layout::LocalLayout& layout, std::unique_ptr<LocalWorkspace>* out);
    ~LocalWorkspace();
    LocalWorkspace(const LocalWorkspace&) = delete;
    LocalWorkspace& operator=(const LocalWorkspace&) = delete;

    const layout::LocalLayout& layout() const { return layout_; }
    layout::LocalBuffers buffers() const { return layout::LocalBuffers::bind(layout_, data_); }

  private:
    LocalWorkspace(const layout::LocalLayout& layout, void* data) : layout_(layout), data_(data) {}

    layout::LocalLayout layout_;
    void* data_;
};

}  // namespace mok::comm
