"""Hand-written C stand-ins for a measured N x N matmul program (crash, hang, wrong answer...).

Each body becomes ``int32_t default_function(float* A, float* B, float* matmul)`` in a .so
carrying the metadata of the real program, so the runner loads and calls it as it would a
built one.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import scheduler_core as sc
from scheduler_core.dag.compute_dag import ComputeDAG
from scheduler_core.schedule.loop_state import State

HEADERS = ("#include <stdint.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n"
           "#include <sys/resource.h>\n#include <sys/socket.h>\n#include <sys/un.h>\n#include <netinet/in.h>\n"
           "#include <arpa/inet.h>\n")


def compile_matmul_stand_ins(dag: ComputeDAG, bodies: dict, out: Path) -> dict:
    """{kind: path of a .so whose ``default_function`` runs ``bodies[kind]``} (compiled with cc)."""
    meta = sc.build(State.from_dag(dag), list(dag.tensors), "llvm", name="default_function").signature.to_meta_json()
    libs = {}
    for kind, body in bodies.items():
        src = out / f"{kind}.c"
        src.write_text(HEADERS + f"const char __autosched_meta_default_function[] = {json.dumps(meta)};\n"
                       f"int32_t default_function(float* A, float* B, float* matmul) {{ {body} }}\n")
        lib = out / f"{kind}.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
        libs[kind] = str(lib)
    return libs
