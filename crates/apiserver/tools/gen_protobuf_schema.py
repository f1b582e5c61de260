#!/usr/bin/env python3
"""Generates crates/apiserver/src/registry/protobuf_schema.json: for every Kubernetes protobuf message
skiff decodes, its fields as [tag, jsonName, kind, messageType, repeated, mapValueKind,
mapValueMessage].

Field numbers and wire kinds come from the `k8s-pb` crate's prost structs, JSON names from the
`k8s-openapi` crate's serde field names (camelCase of the Rust name when absent). Run after
`cargo fetch` has both crates in ~/.cargo/registry:

    python3 crates/apiserver/tools/gen_protobuf_schema.py
"""
import glob, json, os, re, sys

REG = glob.glob(os.path.expanduser("~/.cargo/registry/src/*/"))[0]
PB = glob.glob(REG + "k8s-pb-0.*/src")[0]
OA = glob.glob(REG + "k8s-openapi-0.29.*/src/v1_33")[0]
DIRS = [
    "api/core/v1", "api/apps/v1", "api/coordination/v1", "api/rbac/v1", "api/events/v1",
    "api/authorization/v1", "api/authentication/v1", "api/policy/v1", "api/autoscaling/v1",
    "api/admissionregistration/v1", "api/scheduling/v1", "api/batch/v1",
    "apimachinery/pkg/apis/meta/v1", "apimachinery/pkg/api/resource", "apimachinery/pkg/util/intstr",
    "apimachinery/pkg/runtime", "apiextensions_apiserver/pkg/apis/apiextensions/v1",
]

def norm(name):
    return name.replace("r#", "").rstrip("_")

def camel(snake):
    parts = norm(snake).split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])

def openapi_names(d, struct):
    out = {}
    for f in glob.glob(f"{OA}/{d}/*.rs"):
        src = open(f).read()
        m = re.search(r"pub struct (\w+) \{", src)
        if not m or m.group(1).lower() != struct.lower():
            continue
        for j, r in re.findall(r'"([^"]+)" => Field::Key_(\w+),', src):
            out[norm(r)] = j
    return out

SKIP = {"Option", "Vec", "BTreeMap", "String", "bool", "i32", "i64", "u8", "f64", "core", "prost", "alloc", "option", "vec", "string", "collections"}

def resolve(d, rust_type):
    # The last path that names a struct: a CamelCase final segment.
    cands = re.findall(r"((?:super::)*(?:\w+::)*[A-Z]\w*)", rust_type)
    cands = [c for c in cands if c.split("::")[-1] not in SKIP]
    if not cands:
        return ""
    path = cands[-1].split("::")
    mod = d.split("/")
    while path and path[0] == "super":
        path.pop(0)
        mod = mod[:-1]
    if len(path) == 1:
        return ".".join(d.split("/") + path)
    return ".".join(mod + path)

schema = {}
for d in DIRS:
    f = f"{PB}/{d}/mod.rs"
    if not os.path.exists(f):
        print("missing", f, file=sys.stderr)
        continue
    lines = open(f).read().split("\n")
    i = 0
    struct = None
    fields = []
    while i < len(lines):
        line = lines[i].strip()
        m = re.match(r"pub struct (\w+) \{", line)
        if m:
            struct, fields = m.group(1), []
            names = openapi_names(d, struct)
        elif struct and line == "}":
            schema[".".join(d.split("/") + [struct])] = fields
            struct = None
        elif struct and line.startswith("#[prost("):
            attr = line
            decl = ""
            j = i + 1
            while not decl.rstrip().endswith(",") or decl.count("<") != decl.count(">"):
                decl += " " + lines[j].strip()
                j += 1
            i = j - 1
            dm = re.match(r"\s*pub (r#\w+|\w+):\s*(.*),$", decl)
            if not dm:
                i += 1
                continue
            rname, rtype = dm.group(1), dm.group(2)
            tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
            repeated = ", repeated" in attr
            mapm = re.search(r'btree_map = "(\w+), (\w+)"', attr)
            if mapm:
                vk = mapm.group(2)
                vmsg = resolve(d, rtype) if vk == "message" else ""
                fields.append([tag, names.get(norm(rname), camel(rname)), "map", "", False, vk, vmsg])
            else:
                kind = re.match(r"#\[prost\((\w+)", attr).group(1)
                msg = resolve(d, rtype) if kind == "message" else ""
                fields.append([tag, names.get(norm(rname), camel(rname)), kind, msg, repeated, "", ""])
        i += 1

out = os.path.join(os.path.dirname(__file__), "..", "src", "registry", "protobuf_schema.json")
with open(out, "w") as fh:
    json.dump(schema, fh, separators=(",", ":"), sort_keys=True)
print(f"{len(schema)} messages -> {out}")
