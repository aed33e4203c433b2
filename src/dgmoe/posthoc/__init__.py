"""Post-hoc evaluation: what is made from finished run folders after training, evaluated on their data.

- `dgmoe soup` (`soup`, `plans`, `members`, `wise_ft`): weight averages of a sweep's runs (uniform, greedy and
  ratatouille soups, WiSE-FT) and output ensembles, each evaluated and written as a run folder of its own
  through `dgmoe.engine.rundir.RunWriter`, averaged by the one rule of `dgmoe.algorithms.averaging`;
- `dgmoe leaderboard` (`leaderboard`): WILDS leaderboard prediction files of the checkpoints a selection picks;
- `evaluator`: the one place a run folder's model is rebuilt for these evaluations;
- `config`: the two commands' configs (light: no torch).

`dgmoe.report` reads and renders what these write; nothing here is imported by it.
"""
