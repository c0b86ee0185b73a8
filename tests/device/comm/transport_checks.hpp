// Comparisons of the transport's results with the CPU's, bit for bit, reporting the first mismatch.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/transport_problem.hpp"
#include "host/plan/host_plan.hpp"

namespace mok::comm::testing {

// Every table of the two plans, entry for entry (status included).
::testing::AssertionResult plans_equal(const plan::HostPlan& got, const plan::HostPlan& expected);

// The rows the consumer saw (`captured`, [capacity, H]) against the plan: x rows (or dy rows) in plan order;
// padding rows are not data and are not compared.
::testing::AssertionResult dispatched_rows_match(const TransportProblem& problem, const plan::HostPlan& plan,
                                                 const std::vector<uint16_t>& captured, bool grads);

::testing::AssertionResult bits_equal(const std::vector<uint16_t>& got, const std::vector<uint16_t>& expected,
                                      const std::string& what);
::testing::AssertionResult bits_equal(const std::vector<float>& got, const std::vector<float>& expected,
                                      const std::string& what);

}  // namespace mok::comm::testing
