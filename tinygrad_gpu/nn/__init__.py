"""Neural-network building blocks with PyTorch's names: Module and layers; ``functional`` holds
the stateless layer functions and losses, ``lora`` low-rank adapters, ``hf`` GPT-2 folders, ``parallel`` DistributedDataParallel."""
from . import functional, init, lora, parallel
from .conv import AvgPool2d, Conv2d, MaxPool2d
from .gpt import GPT, GPTConfig, KVCache
from .layers import GELU, Dropout, Embedding, Flatten, LayerNorm, Linear, ReLU
from .lstm import LSTM, LSTMLanguageModel
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential

__all__ = ["functional", "init", "lora", "parallel", "Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "Linear",
           "Embedding", "LayerNorm", "Dropout", "GELU", "LSTM", "LSTMLanguageModel", "GPT", "GPTConfig", "KVCache",
           "Conv2d", "MaxPool2d", "AvgPool2d", "ReLU", "Flatten"]
