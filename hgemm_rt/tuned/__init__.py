"""The shipped tuning tables: one JSON file per GPU, `<device key>.json` (tuning.device_key of the GPU's name,
e.g. NVIDIA_H200.json), each written by `hgemm-tune` on that GPU and read by table.py. matmul consults the table
of the GPU it runs on after the user's tuning cache and before the cost model (plans.PlanCache.recipe;
docs/dev/planner.md#shipped-tables).
"""
from .table import SCHEMA, enabled, forget, lookup, table_path

__all__ = ["SCHEMA", "enabled", "forget", "lookup", "table_path"]
