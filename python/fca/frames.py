"""Messages as rows and rows as pandas DataFrames, every field kept.

proto3 does not put a zero, an empty string or `false` on the wire, and its
JSON mapping leaves them out unless asked; `layer 0` then vanishes from a
pivot. Here every field of the message's descriptor becomes a column with its
value, defaults included: int64 stays int, a Timestamp becomes a UTC
datetime (None when unset), an enum its short name ("SUCCEEDED"), an unset `optional` field
None (NaN in a frame). pandas is optional: without it the `*_frame`
functions raise ImportError naming the package to install.
"""

import datetime

from google.protobuf.descriptor import FieldDescriptor

from fca import _optional, enums


def _pandas():
    return _optional.require("pandas", "a DataFrame", "python3-pandas", "pandas")


def have_pandas():
    return _optional.available("pandas")


def _timestamp(ts):
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    return datetime.datetime.fromtimestamp(ts.seconds, tz=datetime.timezone.utc) + \
        datetime.timedelta(microseconds=ts.nanos // 1000)


def _scalar(field, value):
    if field.type == FieldDescriptor.TYPE_ENUM:
        return enums.short_name(field.enum_type, value)
    return value


def _value(message, field):
    value = getattr(message, field.name)
    if field.label == FieldDescriptor.LABEL_REPEATED:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            return [row(m) for m in value]
        return [_scalar(field, v) for v in value]
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.full_name == "google.protobuf.Timestamp":
            return _timestamp(value) if message.HasField(field.name) else None
        return row(value) if message.HasField(field.name) else None
    # `optional` scalars (proto3 explicit presence) and oneof members: None
    # when unset, so that "no CI" is not read as a CI of 0.
    if field.containing_oneof is not None and not message.HasField(field.name):
        return None
    return _scalar(field, value)


def row(message, skip=()):
    """A dict of every field of `message`, in declaration order."""
    return {f.name: _value(message, f) for f in message.DESCRIPTOR.fields if f.name not in skip}


def columns(descriptor, skip=()):
    return [f.name for f in descriptor.fields if f.name not in skip]


def frame(rows, cols):
    """A DataFrame of `rows` (dicts) with columns `cols` in that order, also
    when there are no rows; datetimes become datetime64[ns, UTC]."""
    pd = _pandas()
    df = pd.DataFrame.from_records(list(rows), columns=cols)
    for c in df.columns:
        if len(df) and df[c].map(lambda v: isinstance(v, datetime.datetime)).any():
            df[c] = pd.to_datetime(df[c], utc=True)
    return df


def flattened(descriptor, rows, nested, skip=()):
    """`rows` (dicts of `descriptor`'s fields) with each message field named
    in `nested` spread over columns of its own, "<field>.<subfield>" (a
    Job's "spec.window_length"), None where the message is unset. Returns
    (rows, columns), the columns in declaration order."""
    subfields = {name: [f.name for f in descriptor.fields_by_name[name].message_type.fields]
                 for name in nested}
    cols = []
    for f in descriptor.fields:
        if f.name in subfields:
            cols.extend(f"{f.name}.{g}" for g in subfields[f.name])
        elif f.name not in skip:
            cols.append(f.name)
    out = []
    for r in rows:
        r = dict(r)
        for name, fields in subfields.items():
            message = r.pop(name, None) or {}
            r.update({f"{name}.{g}": message.get(g) for g in fields})
        out.append(r)
    return out, cols


def messages_frame(messages, descriptor, skip=()):
    return frame((row(m, skip) for m in messages), columns(descriptor, skip))


# A Result's typed key (Result.key) in columns of its own, in the place of
# `key`: the metric's name alone, the scope ("layer", "expert", ...; None
# for a metric the server does not know) and the scope's fields, None where
# the scope has none. A pivot selects and indexes by them; nothing splits
# the stored name in `metric`.
_SCOPE_PREFIX = "METRIC_SCOPE_"


def key_fields(descriptor):
    """The fields of a ResultKey `descriptor` that a scope sets (layer,
    expert, site, family, baseline, ...): all but its metric and scope, so a
    field added to the proto becomes a column with no change here."""
    return tuple(f.name for f in descriptor.fields if f.name not in ("metric", "scope"))


def key_columns(descriptor):
    return ("key_metric", "scope") + key_fields(descriptor)


def key_row(key):
    scope = key.DESCRIPTOR.fields_by_name["scope"].enum_type.values_by_number.get(key.scope)
    out = {"key_metric": key.metric,
           "scope": None if scope is None or key.scope == 0 else
           scope.name[len(_SCOPE_PREFIX):].lower()}
    for f in key.DESCRIPTOR.fields:
        if f.name in ("metric", "scope"):
            continue
        value = getattr(key, f.name)
        has = key.HasField(f.name) if f.has_presence else value != f.default_value
        out[f.name] = value if has else None
    return out


def result_row(result):
    """A Result as a row: `value` is None (NaN) where the row is undefined,
    as `fca results --format=csv` leaves it empty; its key in key_columns."""
    r = row(result, skip=("key",))
    r.update(key_row(result.key))
    if not result.defined:
        r["value"] = None
    return r


def result_columns(descriptor):
    """A Result frame's columns: the message's fields, key_columns for key."""
    out = []
    for f in descriptor.fields:
        out.extend(key_columns(f.message_type) if f.name == "key" else [f.name])
    return out


def results_frame(results, descriptor, extra=None):
    """Result messages as a frame; `extra` columns (name -> value) go first."""
    extra = extra or {}
    rows = ({**extra, **result_row(r)} for r in results)
    return frame(rows, list(extra) + result_columns(descriptor))


def html_table(pairs):
    """A two-column HTML table of (label, value) pairs, escaped."""
    import html
    cells = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                    f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>" for k, v in pairs)
    return f"<table>{cells}</table>"
