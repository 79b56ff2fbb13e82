#!/usr/bin/env bash
# Packaging check of the Python package (python/): builds its sdist and its wheel with the
# pinned maturin into a temporary directory, checks that both hold the license files and
# carry python/README.md as their description, that
# the wheel installs into a fresh virtualenv and imports, and that the sdist builds a wheel
# that installs and imports too. Fails on the first error. .ci/run runs it.
# Uses target/pyenv (scripts/test-python.sh's venv) when it has the pinned maturin, else
# makes target/pkgenv with it. The sdist's build compiles the extension from scratch, in
# release (20-37 s on 2 shared cores; the whole script: 26-43 s).
set -euo pipefail
cd "$(dirname "$0")/.."

maturin_version=1.16.0  # as scripts/test-python.sh
start=$(date +%s)
step() { echo "== package-python: $1 ($(( $(date +%s) - start ))s)"; }

venv=target/pyenv
if ! "$venv/bin/maturin" --version 2>/dev/null | grep -qx "maturin $maturin_version"; then
    venv=target/pkgenv
    step "virtualenv with maturin $maturin_version in $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "maturin==$maturin_version"
fi
# maturin's PEP 517 hooks run the `maturin` command: the venv's bin must be on PATH.
export PATH="$PWD/$venv/bin:$PATH"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

step "maturin sdist and maturin build --release into $out"
(cd python && maturin sdist --out "$out/dist" && maturin build --release --out "$out/dist")
sdist=$(echo "$out"/dist/agentwal-*.tar.gz)
wheel=$(echo "$out"/dist/agentwal-*.whl)
ls -l "$sdist" "$wheel"

step "license files in the sdist and in the wheel's dist-info"
name=$(basename "$sdist" .tar.gz)
sdist_list=$(tar tzf "$sdist")
wheel_list=$(unzip -Z1 "$wheel")
for f in LICENSE-MIT LICENSE-APACHE; do
    grep -qx "$name/$f" <<<"$sdist_list" || { echo "the sdist lacks $f"; exit 1; }
    grep -qx "${name}.dist-info/licenses/$f" <<<"$wheel_list" || { echo "the wheel lacks $f"; exit 1; }
    tar xzf "$sdist" -O "$name/PKG-INFO" | grep -qx "License-File: $f" || { echo "PKG-INFO lacks $f"; exit 1; }
    unzip -p "$wheel" "${name}.dist-info/METADATA" | grep -qx "License-File: $f" || { echo "METADATA lacks $f"; exit 1; }
done
unzip -p "$wheel" "${name}.dist-info/METADATA" | grep -qx "License-Expression: MIT OR Apache-2.0"

step "one description: python/README.md, the sdist's PKG-INFO and the wheel's METADATA"
# pyproject.toml's `readme` is PYPI.md, a symlink to README.md (the sdist puts pyproject.toml
# at the workspace root, where README.md is the root crate's), so the two cannot drift; this
# checks the link and that the description both distributions carry is README.md's text.
[ "$(readlink python/PYPI.md)" = README.md ] || { echo "python/PYPI.md must be a symlink to README.md"; exit 1; }
same_text() {  # the body after the metadata headers equals python/README.md, bar blank edges
    python3 -c 'import sys; a, b = sys.stdin.read().split("\n\n", 1)[1], open(sys.argv[1]).read()
sys.exit(a.strip() != b.strip())' python/README.md
}
tar xzf "$sdist" -O "$name/PKG-INFO" | same_text || { echo "the sdist's description is not python/README.md"; exit 1; }
unzip -p "$wheel" "${name}.dist-info/METADATA" | same_text || { echo "the wheel's description is not python/README.md"; exit 1; }

# Outside the repository, so that python/agentwal (no built extension) cannot shadow the
# installed package.
check_import() {
    (cd "$out" && "$1/bin/python" -c 'import agentwal, agentwal._agentwal, sys
assert agentwal.__file__.startswith(sys.prefix), agentwal.__file__
with agentwal.Store.open("import-check", sync="never") as s:
    assert s.commit("t", {"set": {"k": 1}}) == 1
print("import agentwal: ok,", agentwal.__file__)')
    rm -rf "$out/import-check"
}

step "the wheel into a fresh virtualenv"
python3 -m venv "$out/venv-wheel"
"$out/venv-wheel/bin/pip" install --quiet --disable-pip-version-check "$wheel"
check_import "$out/venv-wheel"

step "the sdist builds a wheel, which installs into a fresh virtualenv"
# pip wheel of the sdist as pip install would build it (its PEP 517 hooks), with the pinned
# maturin of $venv (--no-build-isolation: none fetched from PyPI).
"$venv/bin/pip" wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps \
    -w "$out/from-sdist" "$sdist"
python3 -m venv "$out/venv-sdist"
"$out/venv-sdist/bin/pip" install --quiet --disable-pip-version-check "$out"/from-sdist/agentwal-*.whl
check_import "$out/venv-sdist"
"$out/venv-sdist/bin/python" -c 'import importlib.metadata as m, pathlib
d = m.distribution("agentwal")
assert {p.name for p in d.files if "licenses" in str(p)} == {"LICENSE-MIT", "LICENSE-APACHE"}, d.files'

step "ok"
