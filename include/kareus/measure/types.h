// SPDX-License-Identifier: Apache-2.0
// The knob and sample types (kareus/knobs/knobs.h) under measure's namespace, for the backends,
// the store and the planners that measure through them.
#pragma once

#include "kareus/knobs/knobs.h"

namespace kareus::measure {

using knobs::CommKnobs;
using knobs::InstructionKnobs;
using knobs::PartitionKnobs;
using knobs::Sample;

}  // namespace kareus::measure
