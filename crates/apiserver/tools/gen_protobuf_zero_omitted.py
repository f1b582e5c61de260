#!/usr/bin/env python3
"""Generates crates/apiserver/src/registry/protobuf_zero_omitted.json: for every Kubernetes
protobuf message skiff decodes, the tags of its scalar fields whose zero value means "unset".

Go's protobuf encoders write every non-pointer field, zero or not (`stdin: false`,
`generation: 0`), while Go's JSON encoder leaves a zero non-pointer field out when it is marked
`omitempty`; a pointer field (`*bool`, `*int32`, `*string`) keeps an explicit zero. Which is
which is only in the Go types, so this reads them: a field is listed when its Go type is a
non-pointer scalar (bool, integers, floats, string or a named type of one) and its `json` tag
has `omitempty`. Run with checkouts of k8s.io/api and k8s.io/apimachinery at the release skiff
serves (v0.33.x):

    python3 crates/apiserver/tools/gen_protobuf_zero_omitted.py API_DIR APIMACHINERY_DIR
"""
import glob, json, os, re, sys

api_dir, apimachinery_dir = sys.argv[1], sys.argv[2]
SCHEMA = os.path.join(os.path.dirname(__file__), "..", "src", "registry", "protobuf_schema.json")
# k8s-pb spells initialisms as words (`HttpGetAction` for `HTTPGetAction`): match ignoring case.
known = {name.lower(): name for name in json.load(open(SCHEMA))}

# (Go package dir, prefix of the message names in protobuf_schema.json)
packages = []
for d in sorted(glob.glob(f"{api_dir}/*/v*")):
    rel = os.path.relpath(d, api_dir)
    packages.append((d, "api." + rel.replace("/", ".")))
for rel in ["pkg/apis/meta/v1", "pkg/runtime", "pkg/util/intstr", "pkg/api/resource", "pkg/types"]:
    packages.append((f"{apimachinery_dir}/{rel}", "apimachinery." + rel.replace("/", ".")))

SCALARS = {"bool", "string", "int", "int32", "int64", "uint32", "uint64", "float32", "float64", "byte"}
sources = {}
named_scalars = set()
for d, prefix in packages:
    files = [f for f in glob.glob(f"{d}/*.go") if not f.endswith("_test.go") and "zz_generated" not in f
             and not os.path.basename(f).startswith("generated")]
    sources[prefix] = [open(f).read() for f in files]
    for src in sources[prefix]:
        for name, base in re.findall(r"^type (\w+) (\w+)\s*$", src, re.M):
            if base in SCALARS:
                named_scalars.add(name)

FIELD = re.compile(r'^\t(\w+)\s+(\S+)\s+`json:"([^"]*)"[^`]*protobuf:"[a-z0-9]+,(\d+),', re.M)
out = {}
for d, prefix in packages:
    for src in sources[prefix]:
        for m in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", src, re.M | re.S):
            msg = known.get(f"{prefix}.{m.group(1)}".lower())
            if msg is None:
                continue
            tags = []
            for name, gotype, jsontag, tag in FIELD.findall(m.group(2)):
                base = gotype.split(".")[-1]
                if gotype.startswith(("*", "[]", "map[")):
                    continue
                if base not in SCALARS and base not in named_scalars:
                    continue
                if "omitempty" not in jsontag.split(",")[1:]:
                    continue
                tags.append(int(tag))
            out[msg] = sorted(tags)

path = os.path.join(os.path.dirname(__file__), "..", "src", "registry", "protobuf_zero_omitted.json")
with open(path, "w") as fh:
    json.dump(out, fh, separators=(",", ":"), sort_keys=True)
print(f"{len(out)} messages -> {path}")
