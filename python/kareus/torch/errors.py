# SPDX-License-Identifier: Apache-2.0
"""The executor's errors: kareus.InputError subclasses, so a job catches them as the runtime's."""
import kareus


class PlanMismatch(kareus.InputError):
    """A plan the job's model cannot run as written (another model, pipeline, partition type or
    slot); raised at start, naming the plan's side and the job's."""


class Unsupported(kareus.InputError):
    """A workload or plan feature the executor does not implement (named in the message)."""
