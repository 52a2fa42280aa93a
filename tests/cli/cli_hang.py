"""Records one step, then hangs (for the pytest plugin's timeout and Ctrl-C tests): a cheaper
fixtures/failures/hang.py, without torch.optim (torch._dynamo) or DataLoader workers.

    --pid-file F      append "ready RUN" once it hangs
"""

import argparse
import os
import sys
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--pid-file", default=None)
    opts = p.parse_args(sys.argv[1:])
    w = torch.ones(2, requires_grad=True)
    (w * 2.0).sum().backward()  # one step
    if opts.pid_file:
        with open(opts.pid_file, "a") as fh:
            fh.write(f"ready {os.environ.get('REPRO_CHECK_RUN_INDEX', '?')}\n")
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    main()
