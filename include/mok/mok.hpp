// mok: a deterministic expert-parallel Mixture-of-Experts layer. Include this for the whole public API.
#pragma once

#include "mok/config.hpp"
#include "mok/layer.hpp"
#include "mok/models.hpp"
#include "mok/status.hpp"
#include "mok/tensor.hpp"
