"""koordfw_job_queue: a job queue over elastic quota (Koord-Queue's role) for koordfw. The plugin is
:class:`koordfw_job_queue.plugin.JobQueue`, registered under the entry-point name ``job_queue``."""

from .jobs import Job, collect_jobs
from .plugin import JobQueue, JobQueueArgs

__all__ = ["Job", "JobQueue", "JobQueueArgs", "collect_jobs"]
