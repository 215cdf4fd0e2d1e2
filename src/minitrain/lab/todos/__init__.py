"""The seam between the learner and the lab: the TODOs declared once (registry), and how a blank one is told from a
wrong one (blank). The lab's lowest layer: grading, the editions, the checker, the runner and the notebooks read it."""
