"""Tiering: which pages of a workload's buffer sit on the fast node, decided each epoch
by a policy (policies/), carried out by one of two engines: the real one moves the pages
with move_pages(2) and times the workload's C kernel (engine.py), the model one predicts
the time from each tier's figures (model.py: calibrated on this machine by calibration.py,
else a roofline of assumed ones). The workloads (cxlbench/workloads) give the epochs,
their exact per-page access counts and what they ask of memory."""
