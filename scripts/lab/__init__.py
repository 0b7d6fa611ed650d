"""The lab: the demo's recipe, studies, trainer comparisons and their reports, and the embedded
arithmetic task's cold start and generative verifier.

It imports the library (`planner`, `rl`, `verifiers`) and is never imported by it. The scripts in
`scripts/` put this folder's parent on `sys.path` (Python does so for a script it runs), so `import lab`
works from them; the tests add it through pytest's `pythonpath`.
"""
