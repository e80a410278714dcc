#!/usr/bin/env python3
"""Checks the OCI archive deploy/image/build.sh wrote, from its bytes alone:

    check.py ARCHIVE VERSION REVISION ARCH=ELF_MACHINE...
    check.py --extract ARCHIVE ARCH DEST


An image index with exactly the architectures asked; for each, a config
naming that architecture, the entrypoint and the labels, a kube-ipvs-proxy
whose ELF header is that architecture's machine, the kube-proxy link beside
it, and iptables, iptables-save and iptables-restore (and ip6tables') led to
iptables-wrapper by the alternatives. Prints each image's size; exits 1 on
the first thing that does not hold. With --extract, writes the proxy binary
of ARCH's image to DEST instead, to run it as the image would (make demo
DEMO_IMAGE=...).
"""

import gzip
import io
import json
import os
import sys
import tarfile

ENTRYPOINT = ["/usr/local/bin/kube-ipvs-proxy"]
WRAPPED = [
    f"{family}{suffix}"
    for family in ("iptables", "ip6tables")
    for suffix in ("", "-save", "-restore")
]


def fail(message):
    print(f"image check: {message}", file=sys.stderr)
    sys.exit(1)


class Layout:
    def __init__(self, path):
        self.tar = tarfile.open(path)
        self.names = set(self.tar.getnames())

    def read(self, name):
        name = name.lstrip("./")
        for candidate in (name, "./" + name):
            if candidate in self.names:
                return self.tar.extractfile(candidate).read()
        fail(f"{name} is not in the archive")

    def blob(self, descriptor):
        algorithm, digest = descriptor["digest"].split(":", 1)
        return self.read(f"blobs/{algorithm}/{digest}")

    def json(self, descriptor):
        return json.loads(self.blob(descriptor))


def layer_tar(data):
    """One layer's tar, gzipped or not."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return tarfile.open(fileobj=io.BytesIO(data))


def layer_files(data):
    """Path -> (type, link target or content) of one layer."""
    files = {}
    with layer_tar(data) as layer:
        for member in layer.getmembers():
            path = "/" + member.name.lstrip("./")
            if member.issym():
                files[path] = ("link", member.linkname)
            elif member.isfile():
                head = layer.extractfile(member).read(64)
                files[path] = ("file", head)
            else:
                files[path] = ("other", None)
    return files


def resolve(files, path, hops=0):
    """Follows symbolic links the way the image's filesystem would."""
    if hops > 16:
        fail(f"{path}: a loop of links")
    kind, value = files.get(path, (None, None))
    if kind != "link":
        return path
    target = value if value.startswith("/") else os.path.normpath(
        os.path.join(os.path.dirname(path), value))
    return resolve(files, target, hops + 1)


def manifests(layout):
    index = json.loads(layout.read("index.json"))
    found = []
    for entry in index.get("manifests", []):
        media = entry.get("mediaType", "")
        if media.endswith("image.index.v1+json") or media.endswith(
                "manifest.list.v2+json"):
            found.extend(layout.json(entry).get("manifests", []))
        else:
            found.append(entry)
    return found


def extract(archive, arch, dest):
    """The image's /usr/local/bin/kube-ipvs-proxy, from the last layer
    that has it."""
    layout = Layout(archive)
    entry = next((e for e in manifests(layout)
                  if e.get("platform", {}).get("architecture") == arch), None)
    if entry is None:
        fail(f"the index has no {arch} image")
    content = None
    for layer in layout.json(entry)["layers"]:
        with layer_tar(layout.blob(layer)) as tar:
            for member in tar.getmembers():
                if member.isfile() and "/" + member.name.lstrip("./") == ENTRYPOINT[0]:
                    content = tar.extractfile(member).read()
    if content is None:
        fail(f"{arch}: no {ENTRYPOINT[0]} in the image")
    with open(dest, "wb") as out:
        out.write(content)
    os.chmod(dest, 0o755)
    print(f"image check: {arch}'s {ENTRYPOINT[0]} ({len(content)} bytes) written to {dest}")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--extract":
        extract(*sys.argv[2:5])
        return
    if len(sys.argv) < 5:
        fail(__doc__)
    archive, version, revision = sys.argv[1:4]
    wanted = dict(arg.split("=", 1) for arg in sys.argv[4:])
    layout = Layout(archive)
    seen = {}
    for entry in manifests(layout):
        arch = entry.get("platform", {}).get("architecture")
        if arch in seen:
            fail(f"two manifests for {arch}")
        seen[arch] = entry
    if set(seen) != set(wanted):
        fail(f"the index holds {sorted(seen)}, not {sorted(wanted)}")
    for arch, entry in sorted(seen.items()):
        manifest = layout.json(entry)
        config = layout.json(manifest["config"])
        if config.get("architecture") != arch or config.get("os") != "linux":
            fail(f"{arch}: the config says {config.get('os')}/{config.get('architecture')}")
        inner = config.get("config", {})
        if inner.get("Entrypoint") != ENTRYPOINT:
            fail(f"{arch}: entrypoint {inner.get('Entrypoint')}")
        labels = inner.get("Labels") or {}
        for key, value in [("org.opencontainers.image.version", version),
                           ("org.opencontainers.image.revision", revision)]:
            if labels.get(key) != value:
                fail(f"{arch}: label {key} is {labels.get(key)!r}, not {value!r}")
        if not labels.get("org.opencontainers.image.source"):
            fail(f"{arch}: no org.opencontainers.image.source label")
        files = {}
        size = 0
        for layer in manifest["layers"]:
            size += layer["size"]
            files.update(layer_files(layout.blob(layer)))
        binary = resolve(files, "/usr/local/bin/kube-proxy")
        if binary != "/usr/local/bin/kube-ipvs-proxy":
            fail(f"{arch}: /usr/local/bin/kube-proxy leads to {binary}")
        kind, head = files.get(binary, (None, b""))
        if kind != "file" or head[:4] != b"\x7fELF":
            fail(f"{arch}: {binary} is not an ELF file")
        machine = int.from_bytes(head[18:20], "little")
        if machine != int(wanted[arch]):
            fail(f"{arch}: {binary} is built for ELF machine {machine}, not {wanted[arch]}")
        for tool in WRAPPED:
            led_to = resolve(files, f"/usr/sbin/{tool}")
            if led_to != "/usr/sbin/iptables-wrapper":
                fail(f"{arch}: /usr/sbin/{tool} leads to {led_to}, not the wrapper")
        for backend in ("nft", "legacy"):
            if resolve(files, f"/usr/sbin/iptables-{backend}-restore") not in files:
                fail(f"{arch}: no iptables-{backend}-restore")
        print(f"RESULT image linux/{arch} ELF machine {machine}, "
              f"{len(manifest['layers'])} layers, {size} bytes compressed")
    print(f"RESULT image archive {os.path.getsize(archive)} bytes, "
          f"{len(seen)} architectures, {version}")


if __name__ == "__main__":
    main()
