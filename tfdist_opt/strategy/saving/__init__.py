"""Saving under our multi-worker strategies: who writes which file, where.

Pure: `storage_sharing` (which workers share a directory's storage, from
evidence) and the decision part of `file_writers` (one writer per
directory). Bound to Keras: `chief_saving` (storage-aware `model.save` for
models built under the strategy) and `chief_callbacks` (storage-aware
file-writing callbacks).
"""
