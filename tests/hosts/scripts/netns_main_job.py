"""Prints this process's network namespace (its emulated host), then runs the
main job (`tfdist_opt.examples.train_cnn`) with the same arguments."""

import os
import runpy
import sys

print("NETNS", os.readlink("/proc/self/ns/net"), flush=True)
sys.argv[0] = "tfdist_opt.examples.train_cnn"
runpy.run_module("tfdist_opt.examples.train_cnn", run_name="__main__")
