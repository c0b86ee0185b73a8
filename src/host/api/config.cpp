#include "mok/config.hpp"

namespace mok {

const char* to_string(ForwardCombine c) {
    switch (c) {
        case ForwardCombine::kPush:
            return "push";
        case ForwardCombine::kDownStores:
            return "down_stores";
        case ForwardCombine::kAuto:
            break;
    }
    return "auto";
}

bool parse_forward_combine(std::string_view name, ForwardCombine* out) {
    for (const ForwardCombine c : {ForwardCombine::kAuto, ForwardCombine::kPush, ForwardCombine::kDownStores}) {
        if (name == to_string(c)) {
            *out = c;
            return true;
        }
    }
    return false;
}

}  // namespace mok
