"""`slm-train <hydra overrides>`: train one model; `-m` runs a sweep (one job per combination).

    slm-train model=debug train.tokens=2e5
    slm-train model=gpt2 model.n_layers=4 model.d_model=256 tokenizer=gpt2 train.precision=bf16-mixed

The run directory is runs/<run_group>/<job key>, where the job key is made from the command's
overrides; running the same command again resumes that run from its last checkpoint (or does nothing
if it completed).
"""

from __future__ import annotations

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from slm.cli.config import CONF_DIR, register_resolvers, reports_user_errors

register_resolvers()


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
@reports_user_errors("slm-train")
def main(cfg: DictConfig) -> None:
    from slm.runs.job import train_run

    run_dir = HydraConfig.get().runtime.output_dir
    record = train_run(OmegaConf.to_container(cfg, resolve=True), run_dir)
    print(f"slm-train: {record['status']}: {run_dir}")


if __name__ == "__main__":
    main()
