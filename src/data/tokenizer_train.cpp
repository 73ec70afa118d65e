// tokenizer_train.cpp: placeholder
