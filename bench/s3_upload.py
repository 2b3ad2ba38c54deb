"""Upload one large output to S3 through afc's multipart path and report peak RSS.

moto's S3 server runs on 127.0.0.1 in this process; the upload runs in a child process, as afc
would, so its peak RSS is afc's alone. Target (issue 4): a 1 GiB output with peak RSS
<= 150 MiB (the spool is streamed part by part; memory holds one part).

    python bench/s3_upload.py [--mib 1024]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import hashlib, sys
from pathlib import Path
from afc_cli.storage.s3 import S3Storage
source = Path(sys.argv[1])
sha = hashlib.sha256()
with open(source, "rb") as fh:
    while chunk := fh.read(1 << 20):
        sha.update(chunk)
storage = S3Storage(sys.argv[2])
meta = {"job_id": "bench", "request_hash": "bench", "sha256": sha.hexdigest(),
        "size": source.stat().st_size}
storage.put_if_absent("bench/big.bin", source, meta)
problem = storage.verify("bench/big.bin", meta["size"], meta["sha256"], source)
assert problem is None, problem
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=1024)
    args = parser.parse_args()

    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AFC_", "AWS_"))},
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
    }
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
    ).create_bucket(Bucket="bench")
    with tempfile.TemporaryDirectory(prefix="afc-s3-bench-") as work:
        source = Path(work) / "big.spool"
        block = os.urandom(1 << 20)
        with open(source, "wb") as fh:
            for _ in range(args.mib):
                fh.write(block)
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(source), "s3://bench/out"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(proc.stderr.read())
    server.stop()
    rss = usage.ru_maxrss / 1024
    print("benchmark                      size       wall      peak RSS   target      met")
    print(
        f"multipart upload to S3 (moto)  {args.mib} MiB  {wall:6.1f} s  {rss:6.0f} MiB"
        f"   <= 150 MiB  {'yes' if rss <= 150 else 'NO'}"
    )


if __name__ == "__main__":
    main()
