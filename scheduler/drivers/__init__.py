"""Drivers: what moves a policy or a job through time (the scenario replayer and its
clock, a job's lifecycle and the rules its attempts end by, the replay's text output,
the in-job stop watch). They import the core and the policies, never the service.
"""
