"""Tests of whole models: scheduler_core.graph (seed 002)."""
