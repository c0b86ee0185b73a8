// What the binding translates between PyTorch and mok's C++ API: a Status into a Python exception, an at::Tensor
// into the TensorView that the C++ API validates, mok's Device into torch's, and the device and stream a call runs
// on. Every op goes through these, so that each argument error reads the same whichever op raised it.
//
// Shapes, dtypes, devices and strides are checked by the C++ API (MoeLayer validates every view); its Status
// becomes a Python exception carrying the message, which names the argument: kInvalidArgument a ValueError,
// kNotSupported a NotImplementedError, any other code a RuntimeError. The binding checks only what it adds: the
// stacking and what a TensorView can hold.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <cstdint>
#include <optional>
#include <string>

#include "mok/mok.hpp"

namespace mok::torch_binding {

// ---------------------------------------------------------------------------------------------------------------
// Errors

[[noreturn]] void raise(const char* op, const Status& status);

void check(const char* op, const Status& status);

[[noreturn]] void invalid(const char* op, const std::string& argument, const std::string& expected);

std::string shape_text(const at::Tensor& t);

// ---------------------------------------------------------------------------------------------------------------
// Tensors and devices

c10::Device torch_device(const Device& device);

// The view of `t` that the C++ API validates; what a TensorView cannot describe at all is the binding's error.
TensorView to_view(const char* op, const std::string& name, const at::Tensor& t);

// Tensors stacked over the local ranks: [L, ...], one entry per local rank.
class Stacked {
  public:
    Stacked(const char* op, int64_t num_local_ranks) : op_(op), num_local_ranks_(num_local_ranks) {}

    // Entry `rank` of `t`, after checking that `t` has one entry per local rank.
    TensorView view(const std::string& name, const at::Tensor& t, int64_t rank) const;

  private:
    const char* op_;
    int64_t num_local_ranks_;
};

// The current stream of the layer's device, and that device made current, for the duration of one call.
class DeviceScope {
  public:
    explicit DeviceScope(const Device& device);
    void* stream() const { return stream_; }

  private:
    std::optional<c10::DeviceGuard> guard_;
    void* stream_ = nullptr;
};

}  // namespace mok::torch_binding
