"""Fleets: one suite run on many machines of a SLURM cluster, one ordinary run per machine
under a shared results folder, then one report over them.

slurm.py is the one module that runs SLURM's commands; script.py writes the sbatch
script; record.py keeps a fleet's folder (results/fleet/<stamp>/: the scripts, the job
ids, the task logs); submit.py submits and resumes; status.py tells each machine's state
from SLURM and from its run; collect.py waits for the jobs and makes the report.
Nothing here is imported by a plain `cxlbench run` except slurm.run_fields."""
