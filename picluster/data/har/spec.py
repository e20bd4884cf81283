"""The UCI HAR layout every source is brought to, and UCI's published counts to compare against."""

RATE_HZ = 50
WINDOW = 128  # 2.56 s
STEP = 64  # 50 % overlap

# Order of the last axis of X: the order of UCI's "Inertial Signals" files.
CHANNELS = (
    "body_acc_x", "body_acc_y", "body_acc_z",
    "body_gyro_x", "body_gyro_y", "body_gyro_z",
    "total_acc_x", "total_acc_y", "total_acc_z",
)
# y = label - 1: UCI's activity_labels.txt numbers these 1..6.
CLASSES = ("WALKING", "WALKING_UPSTAIRS", "WALKING_DOWNSTAIRS", "SITTING", "STANDING", "LAYING")

SUBJECTS = tuple(range(1, 31))
TEST_SUBJECTS = (2, 4, 9, 10, 12, 13, 18, 20, 24)
TRAIN_SUBJECTS = tuple(s for s in SUBJECTS if s not in TEST_SUBJECTS)
# Every fifth training volunteer (about a fifth of the training windows) is held out for model
# selection, so that choosing hyper-parameters never looks at the test volunteers.
VALIDATION_SUBJECTS = TRAIN_SUBJECTS[2::5]

# Windows in UCI HAR 1.0 (y_train.txt, y_test.txt, subject_*.txt), for the summary beside ours.
UCI_CLASS_COUNTS = {
    "train": (1226, 1073, 986, 1286, 1374, 1407),
    "test": (496, 471, 420, 491, 532, 537),
}
UCI_SUBJECT_COUNTS = {
    1: 347, 2: 302, 3: 341, 4: 317, 5: 302, 6: 325, 7: 308, 8: 281, 9: 288, 10: 294,
    11: 316, 12: 320, 13: 327, 14: 323, 15: 328, 16: 366, 17: 368, 18: 364, 19: 360, 20: 354,
    21: 408, 22: 321, 23: 372, 24: 381, 25: 409, 26: 392, 27: 376, 28: 382, 29: 344, 30: 383,
}
