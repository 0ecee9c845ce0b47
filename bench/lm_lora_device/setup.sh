#!/bin/bash
# Call 1 on the device machine, from the repository root: wheels into /tmp/site, versions, the imports a LoRA run needs.
set -u
mkdir -p /tmp/lora /tmp/runs
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/lora/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ python3 -V; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))";
  for m in transformers tokenizers peft accelerate safetensors gguf stable_baselines3 gymnasium pydantic numpy filelock; do
    python3 -c "import $m; print('$m', $m.__version__)"; done; } | tee /tmp/runs/versions.txt
python3 -c "import llm_policy_gen.modes.lm_policy, llm_policy_gen.lm.lora, llm_policy_gen.lm.heads; print('imports ok')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
