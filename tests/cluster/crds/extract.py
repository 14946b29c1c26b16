"""Writes the `openAPIV3Schema` of a CRD file as the test data next to this file.

    python tests/cluster/crds/extract.py CRD.yaml OUT.json.gz SOURCE

keeps, of the CRD's served version, the schema with its `description`
fields removed (they do not take part in validation) and the source (repo,
tag, commit, path), gzip-compressed JSON (each file's `source` names the commit). The files
here were written from:

- kubeflow/trainer v2.3.0, manifests/base/crds/
  trainer.kubeflow.org_{trainingruntimes,clustertrainingruntimes,trainjobs}.yaml;
- kubernetes-sigs/jobset v0.12.0 (the JobSet Trainer v2.3.0 builds on,
  go.mod), config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml;
- ray-project/kuberay v1.7.0, ray-operator/config/crd/bases/ray.io_rayjobs.yaml;
- kubeflow/trainer v1.9.4 (the training-operator 1.9 branch, the last that
  serves TFJob), manifests/base/crds/kubeflow.org_tfjobs.yaml.
"""

import gzip
import json
import sys

import yaml


def strip(node):
    """The schema without `description` keys (a property named so is kept)."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "description" and isinstance(v, str):
                continue
            if k == "properties":
                out[k] = {name: strip(s) for name, s in v.items()}
            else:
                out[k] = strip(v)
        return out
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main(src, out, source):
    with open(src) as f:
        crd = yaml.safe_load(f)
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served", True) and v.get("storage")]
    data = {
        "source": source,
        "group": crd["spec"]["group"],
        "kind": crd["spec"]["names"]["kind"],
        "scope": crd["spec"]["scope"],
        "version": version["name"],
        "openAPIV3Schema": strip(version["schema"]["openAPIV3Schema"]),
    }
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())


if __name__ == "__main__":
    main(*sys.argv[1:])
