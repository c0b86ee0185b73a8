// Assertions on a Status: its code, and for kInvalidArgument that the message names the argument.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "mok/status.hpp"

namespace mok::testing {

// kInvalidArgument, a message of the form "argument '<path>': expected ...", containing `fragment` (what was
// expected or what was given).
inline ::testing::AssertionResult is_invalid_argument(const Status& status, const std::string& path,
                                                      const std::string& fragment) {
    if (status.code() != StatusCode::kInvalidArgument) {
        return ::testing::AssertionFailure()
               << "got " << status.to_string() << ", expected invalid argument '" << path << "'";
    }
    const std::string prefix = "argument '" + path + "': expected ";
    if (status.message().rfind(prefix, 0) != 0) {
        return ::testing::AssertionFailure()
               << "message \"" << status.message() << "\" does not start with \"" << prefix << "\"";
    }
    if (status.message().find(fragment) == std::string::npos) {
        return ::testing::AssertionFailure()
               << "message \"" << status.message() << "\" does not mention \"" << fragment << "\"";
    }
    return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult has_code(const Status& status, StatusCode code, const std::string& fragment) {
    if (status.code() != code) {
        return ::testing::AssertionFailure() << "got " << status.to_string() << ", expected " << to_string(code);
    }
    if (status.message().find(fragment) == std::string::npos) {
        return ::testing::AssertionFailure()
               << "message \"" << status.message() << "\" does not mention \"" << fragment << "\"";
    }
    return ::testing::AssertionSuccess();
}

}  // namespace mok::testing
