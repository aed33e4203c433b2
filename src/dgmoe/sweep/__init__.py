"""DomainBed sweeps: the job grid, launchers (local pool, Slurm via submitit), job states, cost estimates."""
from dgmoe.sweep.estimate import estimate_study
from dgmoe.sweep.jobs import Job, SweepConfig, build_jobs, check_sweep
from dgmoe.sweep.launchers import LAUNCHERS, LaunchOptions, launch_sweep
from dgmoe.sweep.state import JobState, job_state
from dgmoe.sweep.status import delete_incomplete, sweep_status

__all__ = ["estimate_study", "Job", "SweepConfig", "build_jobs", "check_sweep", "LAUNCHERS", "LaunchOptions",
           "launch_sweep", "JobState", "job_state", "delete_incomplete", "sweep_status"]
