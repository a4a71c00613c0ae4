"""Neural-network building blocks with PyTorch's names: Module and layers; ``functional`` holds
the stateless layer functions and losses, ``lora`` low-rank adapters, ``hf`` GPT-2 folders, ``parallel`` DistributedDataParallel,
``utils`` gradient clipping (torch.nn.utils' place for it)."""
from . import functional, init, lora, parallel, utils
from .activation_modules import ELU, Identity, LeakyReLU, LogSoftmax, Sigmoid, SiLU, Softmax, Softplus, Tanh
from .batchnorm import BatchNorm1d
from .conv import AvgPool2d, Conv2d, MaxPool2d
from .gpt import GPT, GPTConfig, KVCache
from .layers import GELU, Dropout, Embedding, Flatten, LayerNorm, Linear, ReLU
from .loss_modules import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from .lstm import LSTM, LSTMLanguageModel
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential

__all__ = ["functional", "init", "lora", "parallel", "Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "Linear",
           "Embedding", "LayerNorm", "Dropout", "GELU", "LSTM", "LSTMLanguageModel", "GPT", "GPTConfig", "KVCache",
           "Conv2d", "MaxPool2d", "AvgPool2d", "ReLU", "Flatten", "utils", "BatchNorm1d",
           "Identity", "Tanh", "Sigmoid", "SiLU", "Softmax", "LogSoftmax", "LeakyReLU", "ELU", "Softplus",
           "MSELoss", "L1Loss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss"]
