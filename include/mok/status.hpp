// Status: how every mok entry point reports failure.
//
// The core never throws and never traps: bad input, schedule overflow and a peer that does not arrive all come
// back as a Status whose message names the argument (or rank and wait) and what was expected. Bindings turn a
// non-ok Status into their language's exception.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace mok {

enum class StatusCode : int32_t {
    kOk = 0,
    kInvalidArgument,   // an argument broke the contract (docs/semantics.md); the message names it
    kScheduleOverflow,  // the routing needs more rows than Config::schedule_capacity_factor allows
    kPeerTimeout,       // a bounded wait ran out; the message names the rank, block and what it waited for
    kNotSupported,      // valid input this build or backend cannot run (e.g. the CUDA backend without a GPU)
    kCudaError,         // a CUDA runtime call failed
    kNcclError,         // an NCCL call failed
    kInternal,          // a broken invariant inside mok: a bug, please report it
};

const char* to_string(StatusCode code);

class [[nodiscard]] Status {
  public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return {}; }
    // "argument 'x': expected <expected>" -- the one shape every validation error takes.
    static Status invalid_argument(const std::string& argument, const std::string& expected);

    bool is_ok() const { return code_ == StatusCode::kOk; }
    explicit operator bool() const { return is_ok(); }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    // "<code name>: <message>", for logs and exception texts.
    std::string to_string() const;

  private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

}  // namespace mok

// Returns early from the enclosing function when `expr` yields a non-ok Status.
#define MOK_RETURN_IF_ERROR(expr)           \
    do {                                    \
        ::mok::Status mok_status_ = (expr); \
        if (!mok_status_.is_ok()) {         \
            return mok_status_;             \
        }                                   \
    } while (false)
