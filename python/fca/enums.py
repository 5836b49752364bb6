"""Enum values by their short names: "SUCCEEDED" for JOB_STATE_SUCCEEDED,
"OWNER" for PROJECT_ROLE_OWNER (the enum type's name in UPPER_SNAKE_CASE and
"_" stripped), as the CLI and the HTTP API print them; input takes either
spelling, in any case. The one home of the rule in Python (the C++ one is
common/proto_json.h's ShortEnumName and FindEnumValue).
"""

import re

from fca.v1 import audit_service_pb2 as pb


def _prefix(enum_type):
    """"JOB_STATE_" for JobState (an EnumDescriptor)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum_type.name).upper() + "_"


def short_name(enum_type, number):
    """The short name of value `number` of `enum_type` (an EnumDescriptor);
    a number the type does not know comes back as it is."""
    value = enum_type.values_by_number.get(number)
    if value is None:
        return number
    prefix = _prefix(enum_type)
    name = value.name
    return name[len(prefix):] if name.startswith(prefix) and len(name) > len(prefix) else name


def value(enum_type, name):
    """The number of the value named `name` (short or full, any case), or
    ValueError listing the short names."""
    upper = str(name).upper()
    for candidate in (upper, _prefix(enum_type) + upper):
        if upper and candidate in enum_type.values_by_name:
            return enum_type.values_by_name[candidate].number
    known = [short_name(enum_type, v.number) for v in enum_type.values if v.number != 0]
    raise ValueError(f"{enum_type.name} must be one of {', '.join(known)}, not {name!r}")


def job_state_name(state):
    """"SUCCEEDED" for JOB_STATE_SUCCEEDED."""
    return short_name(pb.JobState.DESCRIPTOR, state)


def job_state(state):
    """"RUNNING" or "JOB_STATE_RUNNING" (any case) as a JobState."""
    number = value(pb.JobState.DESCRIPTOR, state)
    if number == pb.JOB_STATE_UNSPECIFIED:
        raise ValueError(f"state must be a job state, not {state!r}")
    return number


def project_role(role):
    """"reader", "writer" or "owner" (or PROJECT_ROLE_OWNER; any case) as a
    ProjectRole."""
    try:
        number = value(pb.ProjectRole.DESCRIPTOR, role)
    except ValueError:
        number = pb.PROJECT_ROLE_UNSPECIFIED
    if number == pb.PROJECT_ROLE_UNSPECIFIED:
        raise ValueError(f"role must be reader, writer or owner, not {role!r}")
    return number
