"""The node agent: makes the operator's CPU assignments true in the kernel's cpusets (its
modules, one line each: docs/DESIGN.md, "Node agent (enforcement)")."""
